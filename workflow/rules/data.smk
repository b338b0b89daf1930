# Data: official archives (checksummed) into downloads_dir (resources/) -> prepared data in data_dir (results/data/).
# Mirrors are passed as --mirror={...:q}: with none configured the option still gets its (empty) value.


localrules:
    download_cifar,


rule download_cifar:
    output:
        f"{DOWNLOADS}/{{name}}-python.tar.gz",
    params:
        url=download_url,
        md5=lambda wildcards: pinned_md5(wildcards.name),
    log:
        "logs/data/download_{name}.log",
    benchmark:
        "logs/data/download_{name}.benchmark.tsv"
    wildcard_constraints:
        name="cifar10|cifar100",
    retries: 2
    resources:
        mem_mb=needs("download_cifar", "mem_mb"),
        runtime=job_runtime("download_cifar"),
    priority: PRIORITY["data"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro download {wildcards.name} --out {output} --url={params.url:q} --md5 {params.md5:q} 2> {log}"


rule prepare_cifar:
    input:
        f"{DOWNLOADS}/{{name}}-python.tar.gz",
    output:
        f"{DATA}/{{name}}.pt",
    log:
        "logs/data/prepare_{name}.log",
    benchmark:
        "logs/data/prepare_{name}.benchmark.tsv"
    wildcard_constraints:
        name="cifar10|cifar100",
    resources:
        mem_mb=needs("prepare_cifar", "mem_mb"),
        runtime=job_runtime("prepare_cifar"),
    priority: PRIORITY["data"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro prepare {wildcards.name} --archive {input} --out {output} 2> {log}"


rule prepare_digits:
    output:
        f"{DATA}/digits.pt",
    log:
        "logs/data/prepare_digits.log",
    benchmark:
        "logs/data/prepare_digits.benchmark.tsv"
    resources:
        mem_mb=needs("prepare_digits", "mem_mb"),
        runtime=job_runtime("prepare_digits"),
    priority: PRIORITY["data"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro prepare digits --out {output} 2> {log}"


localrules:
    fetch_translation,


rule fetch_translation:
    output:
        f"{DOWNLOADS}/{{dataset}}/fetched.json",
    params:
        mirror=translation_mirror,
        mirrors=lambda wildcards: extra_sources(wildcards.dataset),
        md5=lambda wildcards: pinned_md5(wildcards.dataset),
        lock=f"{DOWNLOADS}/checksums.lock.json",
    log:
        "logs/data/fetch_{dataset}.log",
    benchmark:
        "logs/data/fetch_{dataset}.benchmark.tsv"
    wildcard_constraints:
        dataset="iwslt15_en_vi|wmt14_en_de|wmt14_en_fr",
    retries: 2
    resources:
        mem_mb=needs("fetch_translation", "mem_mb"),
        runtime=job_runtime("fetch_translation"),
    priority: PRIORITY["data"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro fetch-translation {wildcards.dataset} --done {output} --mirror={params.mirror:q} --mirrors {params.mirrors:q}"
        " --md5 {params.md5:q} --lock {params.lock} 2> {log}"


rule prepare_translation:
    input:
        f"{DOWNLOADS}/{{dataset}}/fetched.json",
    output:
        f"{DATA}/{{dataset}}/prepared.json",
    log:
        "logs/data/prepare_{dataset}.log",
    benchmark:
        "logs/data/prepare_{dataset}.benchmark.tsv"
    wildcard_constraints:
        dataset="iwslt15_en_vi|wmt14_en_de|wmt14_en_fr",
    resources:
        mem_mb=needs("prepare_translation", "mem_mb"),
        runtime=job_runtime("prepare_translation"),
    priority: PRIORITY["data"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro prepare-translation {wildcards.dataset} --raw-dir $(dirname {input}) --out-dir $(dirname {output}) 2> {log}"


rule synthesize_translation:
    output:
        f"{DATA}/synthetic/prepared.json",
    log:
        "logs/data/prepare_synthetic.log",
    benchmark:
        "logs/data/prepare_synthetic.benchmark.tsv"
    resources:
        mem_mb=needs("synthesize_translation", "mem_mb"),
        runtime=job_runtime("synthesize_translation"),
    priority: PRIORITY["data"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro prepare-translation synthetic --out-dir $(dirname {output}) 2> {log}"


rule synthesize_scenes:
    output:
        f"{DATA}/scenes/prepared.json",
    log:
        "logs/data/prepare_scenes.log",
    benchmark:
        "logs/data/prepare_scenes.benchmark.tsv"
    resources:
        mem_mb=needs("synthesize_scenes", "mem_mb"),
        runtime=job_runtime("synthesize_scenes"),
    priority: PRIORITY["data"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro prepare-captioning scenes --out-dir $(dirname {output}) 2> {log}"


localrules:
    fetch_coco,


rule fetch_coco:
    output:
        f"{DOWNLOADS}/mscoco/fetched.json",
    params:
        mirror=lambda wildcards: config.get("download_urls", {}).get("mscoco", ""),
        mirrors=extra_sources("mscoco"),
        md5=pinned_md5("mscoco"),
        lock=f"{DOWNLOADS}/checksums.lock.json",
    log:
        "logs/data/fetch_mscoco.log",
    benchmark:
        "logs/data/fetch_mscoco.benchmark.tsv"
    retries: 2
    resources:
        mem_mb=needs("fetch_coco", "mem_mb"),
        runtime=job_runtime("fetch_coco"),
    priority: PRIORITY["data"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro fetch-coco --done {output} --mirror={params.mirror:q} --mirrors {params.mirrors:q} --md5 {params.md5:q}"
        " --lock {params.lock} 2> {log}"


localrules:
    fetch_backbone,


# The grid backbone's ImageNet weights (data/backbones.py), downloaded here: prepare_coco runs on a
# GPU node, which may have no internet.
rule fetch_backbone:
    output:
        f"{DOWNLOADS}/backbones/{{backbone}}.{{weights}}.pth",
    params:
        mirror=lambda wildcards: config.get("download_urls", {}).get(wildcards.backbone, ""),
        md5=lambda wildcards: pinned_md5(wildcards.backbone),
    log:
        "logs/data/fetch_backbone_{backbone}.{weights}.log",
    benchmark:
        "logs/data/fetch_backbone_{backbone}.{weights}.benchmark.tsv"
    wildcard_constraints:
        backbone="[a-z0-9_]+",
        weights="[A-Za-z0-9_]+",
    resources:
        mem_mb=needs("fetch_backbone", "mem_mb"),
        runtime=job_runtime("fetch_backbone"),
    retries: 2
    priority: PRIORITY["data"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro fetch-backbone {wildcards.backbone} --weights {wildcards.weights} --out {output}"
        " --mirror={params.mirror:q} --md5 {params.md5:q} 2> {log}"


# Karpathy's splits, the vocabulary, and one feature file per split: a backbone's grid on a GPU
# (captioning.features), or the user's bottom-up TSV files.
rule prepare_coco:
    input:
        fetched=f"{DOWNLOADS}/mscoco/fetched.json",
        bottom_up=bottom_up_files,
        weights=backbone_weights,
    output:
        f"{DATA}/mscoco/prepared.json",
    params:
        kind=lambda wildcards: coco_features()["kind"],
        backbone=lambda wildcards: json.dumps(coco_features().get("backbone", {}), sort_keys=True),
    log:
        "logs/data/prepare_mscoco.log",
    benchmark:
        "logs/data/prepare_mscoco.benchmark.tsv"
    resources:
        gpu=single_gpu(),
        mem_mb=needs("prepare_coco", "mem_mb"),
        runtime=job_runtime("prepare_coco"),
    priority: PRIORITY["data"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro launch --gpus {resources.gpu} -- prepare-captioning mscoco --raw-dir $(dirname {input.fetched})"
        " --out-dir $(dirname {output}) --features {params.kind} --backbone {params.backbone:q}"
        " --bottom-up {input.bottom_up} --weights-file {input.weights} 2> {log}"

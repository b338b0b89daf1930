# One job per cell and group of seeds (seeds_per_job): it trains its seeds one after another in
# one process, each into its own seed<N>/ folder (metrics.json, train_log.csv, checkpoints/), and
# writes the job's trained.json last. Checkpoints are not declared outputs, so a failed or killed
# job keeps them and its rerun resumes each seed from its last finished epoch; seeds already
# finished only rewrite their metrics. With seeds_in_parallel > 1 its seeds train side by side, each
# its own process on the job's device; with seeds_stacked, a classification job's seeds train as one
# program (stacked models); resources, not params: changing them retrains nothing.
# A run longer than the job's runtime (at most max_job_minutes) stops at a checkpoint before the
# limit and fails the job; its retries continue it, each in a new job, and append to its log.


rule train_classifier:
    input:
        prepared_data,
    output:
        "results/{scale}/classification/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/trained.json",
    params:
        spec=train_spec,
        seeds=job_seeds("classification"),
        cell=cell_dir,
    log:
        "results/{scale}/classification/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/train.log",
    benchmark:
        "results/{scale}/classification/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/train.benchmark.tsv"
    threads: 1
    resources:
        gpu=single_gpu(),
        mem_mb=needs("train_classifier", "mem_mb"),
        runtime=runtime_of_training("train_classifier", "classification"),
        seeds_at_once=seeds_at_once("classification"),
        stacked=int(config.get("seeds_stacked", False)),
    retries: training_retries("train_classifier", "classification")
    priority: PRIORITY["training"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        # launch: the job's GPU (its lock held till the end), or none visible when it holds none
        "resrepro launch --gpus {resources.gpu} -- train --spec {params.spec:q} --seeds {params.seeds} --data {input}"
        " --cell-dir {params.cell} --done {output} --threads {threads} --parallel {resources.seeds_at_once} --stack {resources.stacked}"
        " --minutes {resources.runtime} 2>> {log}"


rule train_translator:
    input:
        f"{DATA}/{{dataset}}/prepared.json",
    output:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/trained.json",
    params:
        spec=translation_spec,
        seeds=job_seeds("translation"),
        cell=cell_dir,
    log:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/train.log",
    benchmark:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/train.benchmark.tsv"
    threads: 1
    resources:
        gpu=translation_gpus,
        mem_mb=needs("train_translator", "mem_mb"),
        runtime=runtime_of_training("train_translator", "translation"),
        seeds_at_once=seeds_at_once("translation"),
    retries: training_retries("train_translator", "translation")
    priority: PRIORITY["long_training"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        # Several GPUs: torchrun ranks inside this one job (one Slurm allocation).
        "resrepro launch --gpus {resources.gpu} -- train-translation --spec {params.spec:q} --seeds {params.seeds}"
        " --data $(dirname {input}) --cell-dir {params.cell} --done {output} --threads {threads}"
        " --parallel {resources.seeds_at_once} --minutes {resources.runtime} 2>> {log}"


rule train_captioner:
    input:
        f"{DATA}/{{dataset}}/prepared.json",
    output:
        "results/{scale}/captioning/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/trained.json",
    params:
        spec=captioning_spec,
        seeds=job_seeds("captioning"),
        cell=cell_dir,
    log:
        "results/{scale}/captioning/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/train.log",
    benchmark:
        "results/{scale}/captioning/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/train.benchmark.tsv"
    threads: 1
    resources:
        gpu=single_gpu(),
        mem_mb=needs("train_captioner", "mem_mb"),
        runtime=runtime_of_training("train_captioner", "captioning"),
        seeds_at_once=seeds_at_once("captioning"),
    retries: training_retries("train_captioner", "captioning")
    priority: PRIORITY["long_training"]
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro launch --gpus {resources.gpu} -- train-captioning --spec {params.spec:q} --seeds {params.seeds}"
        " --data $(dirname {input}) --cell-dir {params.cell} --done {output} --threads {threads}"
        " --parallel {resources.seeds_at_once} --minutes {resources.runtime} 2>> {log}"

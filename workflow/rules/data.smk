# Data: official archives (checksummed) -> prepared tensors in results/data/.


localrules:
    download_cifar,


rule download_cifar:
    output:
        "resources/{name}-python.tar.gz",
    params:
        url=download_url,
    log:
        "logs/data/download_{name}.log",
    wildcard_constraints:
        name="cifar10|cifar100",
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro download {wildcards.name} --out {output} --url {params.url:q} 2> {log}"


rule prepare_cifar:
    input:
        "resources/{name}-python.tar.gz",
    output:
        "results/data/{name}.pt",
    log:
        "logs/data/prepare_{name}.log",
    wildcard_constraints:
        name="cifar10|cifar100",
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro prepare {wildcards.name} --archive {input} --out {output} 2> {log}"


rule prepare_digits:
    output:
        "results/data/digits.pt",
    log:
        "logs/data/prepare_digits.log",
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro prepare digits --out {output} 2> {log}"

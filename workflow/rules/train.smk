# One job per run (cell x seed). Checkpoints are not declared outputs, so a failed or killed job
# keeps them and its rerun resumes from the last finished epoch.


rule train_classifier:
    input:
        prepared_data,
    output:
        metrics="results/{scale}/classification/{dataset}/{arch}/{variant}/seed{seed}/metrics.json",
        log="results/{scale}/classification/{dataset}/{arch}/{variant}/seed{seed}/train_log.csv",
    params:
        spec=train_spec,
    log:
        "results/{scale}/classification/{dataset}/{arch}/{variant}/seed{seed}/train.log",
    benchmark:
        "results/{scale}/classification/{dataset}/{arch}/{variant}/seed{seed}/benchmark.tsv"
    threads: 1
    resources:
        gpu=config["gpus_per_job"],
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro train --spec {params.spec:q} --data {input} --out-dir $(dirname {output.metrics})"
        " --threads {threads} 2> {log}"


rule train_translator:
    input:
        "results/data/{dataset}/prepared.json",
    output:
        metrics="results/{scale}/translation/{dataset}/{arch}/{variant}/seed{seed}/metrics.json",
        log="results/{scale}/translation/{dataset}/{arch}/{variant}/seed{seed}/train_log.csv",
    params:
        spec=translation_spec,
    log:
        "results/{scale}/translation/{dataset}/{arch}/{variant}/seed{seed}/train.log",
    benchmark:
        "results/{scale}/translation/{dataset}/{arch}/{variant}/seed{seed}/benchmark.tsv"
    threads: 1
    resources:
        gpu=config["gpus_per_job"],
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro train-translation --spec {params.spec:q} --data $(dirname {input}) --out-dir $(dirname {output.metrics})"
        " --threads {threads} 2> {log}"

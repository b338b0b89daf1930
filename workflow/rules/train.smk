# One job per run (cell x seed). Checkpoints are not declared outputs, so a failed or killed job
# keeps them and its rerun resumes from the last finished epoch.


rule train_classifier:
    input:
        prepared_data,
    output:
        metrics="results/{scale}/classification/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/metrics.json",
        log="results/{scale}/classification/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/train_log.csv",
    params:
        spec=train_spec,
    log:
        "results/{scale}/classification/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/train.log",
    benchmark:
        "results/{scale}/classification/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/benchmark.tsv"
    threads: 1
    resources:
        gpu=single_gpu(),
        mem_mb=needs("train_classifier", "mem_mb"),
        runtime=needs("train_classifier", "runtime"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        # launch: the job's GPU (its lock held till the end), or none visible when it holds none
        "resrepro launch --gpus {resources.gpu} -- train --spec {params.spec:q} --data {input} --out-dir $(dirname {output.metrics})"
        " --threads {threads} 2> {log}"


rule train_translator:
    input:
        "results/data/{dataset}/prepared.json",
    output:
        metrics="results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/metrics.json",
        log="results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/train_log.csv",
    params:
        spec=translation_spec,
    log:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/train.log",
    benchmark:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/benchmark.tsv"
    threads: 1
    resources:
        gpu=translation_gpus,
        mem_mb=needs("train_translator", "mem_mb"),
        runtime=needs("train_translator", "runtime"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        # Several GPUs: torchrun ranks inside this one job (one Slurm allocation).
        "resrepro launch --gpus {resources.gpu} -- train-translation --spec {params.spec:q} --data $(dirname {input})"
        " --out-dir $(dirname {output.metrics}) --threads {threads} 2> {log}"

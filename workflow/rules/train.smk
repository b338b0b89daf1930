# One job per run (cell x seed). Checkpoints are not declared outputs, so a failed or killed job
# keeps them and its rerun resumes from the last finished epoch.


rule train_classifier:
    input:
        prepared_data,
    output:
        metrics="results/{scale}/{task}/{dataset}/{arch}/{variant}/seed{seed}/metrics.json",
        log="results/{scale}/{task}/{dataset}/{arch}/{variant}/seed{seed}/train_log.csv",
    params:
        spec=train_spec,
    log:
        "results/{scale}/{task}/{dataset}/{arch}/{variant}/seed{seed}/train.log",
    benchmark:
        "results/{scale}/{task}/{dataset}/{arch}/{variant}/seed{seed}/benchmark.tsv"
    threads: 1
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro train --spec {params.spec:q} --data {input} --out-dir $(dirname {output.metrics})"
        " --threads {threads} 2> {log}"

# One job per run (cell x seed). Checkpoints are not declared outputs, so a failed or killed job
# keeps them and its rerun resumes from the last finished epoch.


rule train_classifier:
    input:
        prepared_data,
    output:
        metrics=RUN_DIR + "/metrics.json",
        log=RUN_DIR + "/train_log.csv",
    params:
        spec=train_spec,
    log:
        RUN_DIR + "/train.log",
    benchmark:
        RUN_DIR + "/benchmark.tsv"
    threads: 1
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro train --spec {params.spec:q} --data {input} --out-dir $(dirname {output.metrics}) --threads {threads} 2> {log}"

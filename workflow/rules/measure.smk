# One job per (run, measurement) of the selected figures: it reads the checkpoint that the run's
# training job wrote (its trained.json marks it finished), so a retrained run is measured again,
# and a changed setting remeasures without retraining.


rule measure:
    input:
        trained=measured_job,
        data=measured_data,
    output:
        layout.measurement_file(),
    params:
        settings=measure_settings,
        run=measured_run_dir,
    log:
        layout.measurement_file(ext="log"),
    benchmark:
        layout.measurement_file(ext="benchmark.tsv")
    # one thread, as Snakemake counts it: torch's default (every core) would crowd the job beside it
    threads: 1
    resources:
        gpu=single_gpu(),
        mem_mb=needs("measure", "mem_mb"),
        runtime=job_runtime("measure"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro launch --gpus {resources.gpu} -- measure --name {wildcards.measurement} --run-dir {params.run} --data {input.data}"
        " --settings {params.settings:q} --out {output} --threads {threads} 2> {log}"

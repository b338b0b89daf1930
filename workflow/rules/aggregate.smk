# All runs -> tidy tables (runs.csv, rows.csv, curves.csv) for the report and for scripting.


rule aggregate:
    input:
        metrics=all_run_metrics(),
        tables=table_files(),
    output:
        rows=RESULTS + "/aggregate/rows.csv",
        runs=RESULTS + "/aggregate/runs.csv",
        curves=RESULTS + "/aggregate/curves.csv",
        plan=RESULTS + "/aggregate/plan.json",
    params:
        plan=aggregate_plan(),
        tables_dir=config["tables_dir"],
        epoch=config["report_epoch"],
    log:
        RESULTS + "/aggregate/aggregate.log",
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro aggregate --plan {params.plan:q} --results-dir {RESULTS} --tables-dir {params.tables_dir}"
        " --epoch {params.epoch} --out-dir $(dirname {output.rows}) 2> {log}"

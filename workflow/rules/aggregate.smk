# All runs -> tidy tables (runs.csv, rows.csv, curves.csv; figures.csv and figure_cells.csv from
# the measurements) for the report and for scripting.


rule aggregate:
    input:
        results=all_run_results,
        measurements=all_measurements,
        tables=table_files(),
    output:
        rows=report("results/{scale}/aggregate/rows.csv", caption="../report/tidy.rst", category="Tidy tables"),
        runs=report("results/{scale}/aggregate/runs.csv", caption="../report/tidy.rst", category="Tidy tables"),
        curves=report("results/{scale}/aggregate/curves.csv", caption="../report/tidy.rst", category="Tidy tables"),
        plan="results/{scale}/aggregate/plan.json",
        figures=report("results/{scale}/aggregate/figures.csv", caption="../report/tidy.rst", category="Tidy tables"),
        figure_cells="results/{scale}/aggregate/figure_cells.csv",
        caption_samples="results/{scale}/aggregate/caption_samples.csv",
    params:
        plan=aggregate_plan(),
        measures=measures_plan(),
        results=results_dir,
        epoch=config["report_epoch"],
        format=experiments.TIDY_FORMAT,
    log:
        "logs/{scale}/aggregate.log",
    benchmark:
        "logs/{scale}/aggregate.benchmark.tsv"
    resources:
        mem_mb=needs("aggregate", "mem_mb"),
        runtime=job_runtime("aggregate"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro aggregate --plan {params.plan:q} --results-dir {params.results} --tables {input.tables}"
        " --epoch {params.epoch} --measures {params.measures:q} --out-dir $(dirname {output.rows}) 2> {log}"


# The paper-scale cost of each table (and of any other scale named in gpu_costs), for the report.
rule gpu_hours:
    input:
        scales=config["gpu_costs"]["scales"],
        step_times=config["gpu_costs"]["step_times"],
        disk=config["gpu_costs"]["disk"],
        tables=table_files(),
    output:
        "results/{scale}/aggregate/gpu_hours.csv",
    log:
        "logs/{scale}/gpu_hours.log",
    resources:
        mem_mb=needs("gpu_hours", "mem_mb"),
        runtime=job_runtime("gpu_hours"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro gpu-hours --scales {input.scales} --step-times {input.step_times} --disk {input.disk} --out {output} 2> {log}"

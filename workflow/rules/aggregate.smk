# The scale's resolved plan, then all runs -> tidy tables (runs.csv, rows.csv, curves.csv;
# figures.csv and figure_cells.csv from the measurements) for the report and for scripting.


localrules:
    plan,


rule plan:
    output:
        layout.plan_file(),
    params:
        digest=plan_digest(),
    log:
        "logs/{scale}/plan.log",
    resources:
        mem_mb=needs("plan", "mem_mb"),
        runtime=job_runtime("plan"),
    run:
        write_plan(output[0], log[0])


rule aggregate:
    input:
        plan=layout.plan_file(),
        results=all_run_results,
        measurements=all_measurements,
    output:
        rows=report(layout.aggregate_file("rows.csv"), caption="../report/tidy.rst", category="Tidy tables"),
        runs=report(layout.aggregate_file("runs.csv"), caption="../report/tidy.rst", category="Tidy tables"),
        curves=report(layout.aggregate_file("curves.csv"), caption="../report/tidy.rst", category="Tidy tables"),
        figures=report(layout.aggregate_file("figures.csv"), caption="../report/tidy.rst", category="Tidy tables"),
        figure_cells=layout.aggregate_file("figure_cells.csv"),
        caption_samples=layout.aggregate_file("caption_samples.csv"),
    params:
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
        "resrepro aggregate --plan {input.plan} --results-dir {params.results} --epoch {params.epoch}"
        " --out-dir $(dirname {output.rows}) 2> {log}"


# The paper-scale cost of each table (and of any other scale named in gpu_costs), for the report.
rule gpu_hours:
    input:
        scales=config["gpu_costs"]["scales"],
        step_times=config["gpu_costs"]["step_times"],
        disk=config["gpu_costs"]["disk"],
        tables=table_files(),
    output:
        layout.aggregate_file("gpu_hours.csv"),
    log:
        "logs/{scale}/gpu_hours.log",
    resources:
        mem_mb=needs("gpu_hours", "mem_mb"),
        runtime=job_runtime("gpu_hours"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro gpu-hours --scales {input.scales} --step-times {input.step_times} --disk {input.disk} --out {output} 2> {log}"

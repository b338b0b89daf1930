# The scale's resolved plan, its parameter counts, then all runs -> tidy tables (runs.csv, rows.csv,
# curves.csv; figures.csv and figure_cells.csv from the measurements); then the judge: every verdict
# the aggregate does not decide (figure checks, difference curves, claims), so the report only renders.


localrules:
    plan,
    checks,
    judge,


# The plan in two files (experiments.PLAN_FILES), each rewritten only when its own part changes: a
# claim or a figure's check edited reruns the judge and the report, not the aggregate.
for part in experiments.PLAN_FILES:

    rule:
        name:
            part
        output:
            layout.plan_file(name=part),
        params:
            digest=plan_digest(part),
            part=part,
        log:
            f"logs/{{scale}}/{part}.log",
        resources:
            mem_mb=needs(part, "mem_mb"),
            runtime=job_runtime(part),
        run:
            write_plan(params.part, output[0], log[0])


# Counting a model builds it (on the meta device): a job of its own, beside training, so that no
# analysis job builds a model.
rule parameters:
    input:
        plan=layout.plan_file(),
    output:
        layout.aggregate_file("parameters.csv"),
    params:
        format=experiments.TIDY_FORMAT,
    log:
        "logs/{scale}/parameters.log",
    benchmark:
        "logs/{scale}/parameters.benchmark.tsv"
    resources:
        mem_mb=needs("parameters", "mem_mb"),
        runtime=job_runtime("parameters"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro parameters --plan {input.plan} --out {output} 2> {log}"


rule aggregate:
    input:
        plan=layout.plan_file(),
        parameters=layout.aggregate_file("parameters.csv"),
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
        "resrepro aggregate --plan {input.plan} --parameters {input.parameters} --results-dir {params.results} --epoch {params.epoch}"
        " --out-dir $(dirname {output.rows}) 2> {log}"


rule judge:
    input:
        plan=layout.plan_file(),
        checks=layout.plan_file(name="checks"),
        rows=layout.aggregate_file("rows.csv"),
        figures=layout.aggregate_file("figures.csv"),
        figure_cells=layout.aggregate_file("figure_cells.csv"),
    output:
        figure_checks=report(layout.aggregate_file("figure_checks.csv"), caption="../report/tidy.rst", category="Tidy tables"),
        figure_differences=layout.aggregate_file("figure_differences.csv"),
        difference_cells=layout.aggregate_file("difference_cells.csv"),
        claims=report(layout.aggregate_file("claims.csv"), caption="../report/tidy.rst", category="Tidy tables"),
    params:
        format=experiments.TIDY_FORMAT,
    log:
        "logs/{scale}/judge.log",
    benchmark:
        "logs/{scale}/judge.benchmark.tsv"
    resources:
        mem_mb=needs("judge", "mem_mb"),
        runtime=job_runtime("judge"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro judge --plan {input.plan} {input.checks} --aggregate-dir $(dirname {input.rows}) 2> {log}"


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

# The HTML report: every selected table, the paper's number beside the reproduced one. It renders
# what the aggregate and the judge decided, and decides nothing.


localrules:
    report,
    gpu_hours,


rule report:
    input:
        rows=layout.aggregate_file("rows.csv"),
        runs=layout.aggregate_file("runs.csv"),
        curves=layout.aggregate_file("curves.csv"),
        plan=layout.plan_file(),
        checks=layout.plan_file(name="checks"),
        figures_data=layout.aggregate_file("figures.csv"),
        figure_cells=layout.aggregate_file("figure_cells.csv"),
        figure_checks=layout.aggregate_file("figure_checks.csv"),
        figure_differences=layout.aggregate_file("figure_differences.csv"),
        difference_cells=layout.aggregate_file("difference_cells.csv"),
        claims=layout.aggregate_file("claims.csv"),
        caption_samples=layout.aggregate_file("caption_samples.csv"),
        gpu_hours=layout.aggregate_file("gpu_hours.csv"),
        template="report/templates/index.html.j2",
    output:
        html=report("report/{scale}/index.html", caption="../report/index.rst", category="Report"),
        # each image of the report as a file, for `snakemake --report` and for readers who want the PNGs
        figures=report(
            directory("report/{scale}/figures"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
    params:
        recipe=report_recipe(),
        note=config.get("note", ""),
        results=results_dir,
    threads: 2  # processes drawing the figures: the last job, beside nothing
    log:
        "logs/{scale}/report.log",
    benchmark:
        "logs/{scale}/report.benchmark.tsv"
    resources:
        mem_mb=needs("report", "mem_mb"),
        runtime=job_runtime("report"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro report --plan {input.plan} {input.checks} --aggregate-dir $(dirname {input.rows}) --template {input.template}"
        " --recipe {params.recipe:q} --note={params.note:q} --results-dir {params.results}"
        " --out {output.html} --figures-dir {output.figures} --threads {threads} 2> {log}"

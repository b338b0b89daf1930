# The HTML report: every selected table, the paper's number beside the reproduced one.


localrules:
    report,
    gpu_hours,


rule report:
    input:
        rows="results/{scale}/aggregate/rows.csv",
        runs="results/{scale}/aggregate/runs.csv",
        curves="results/{scale}/aggregate/curves.csv",
        plan="results/{scale}/aggregate/plan.json",
        figures_data="results/{scale}/aggregate/figures.csv",
        figure_cells="results/{scale}/aggregate/figure_cells.csv",
        caption_samples="results/{scale}/aggregate/caption_samples.csv",
        gpu_hours="results/{scale}/aggregate/gpu_hours.csv",
        tables=table_files(),
        figures=figure_files(),
        claims=claims_file(),
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
        "resrepro report --aggregate-dir $(dirname {input.rows}) --tables {input.tables} --figures {input.figures} --claims {input.claims} --template {input.template}"
        " --scale {wildcards.scale} --recipe {params.recipe:q} --note={params.note:q} --results-dir {params.results}"
        " --out {output.html} --figures-dir {output.figures} --threads {threads} 2> {log}"

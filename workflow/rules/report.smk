# The HTML report: every selected table, the paper's number beside the reproduced one.


localrules:
    report,


rule report:
    input:
        rows=rules.aggregate.output.rows,
        runs=rules.aggregate.output.runs,
        curves=rules.aggregate.output.curves,
        plan=rules.aggregate.output.plan,
        template="report/templates/index.html.j2",
        tables=table_files(),
    output:
        "report/{scale}/index.html".format(scale=SCALE),
    params:
        tables_dir=config["tables_dir"],
        recipe=report_recipe(),
    log:
        f"logs/report_{SCALE}.log",
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro report --aggregate-dir $(dirname {input.rows}) --tables-dir {params.tables_dir} --template {input.template}"
        " --scale {SCALE} --recipe {params.recipe:q} --out {output} 2> {log}"

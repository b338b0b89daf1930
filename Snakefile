# resrepro: every table and figure of four papers on residual connections, end to end.
#   snakemake --cores N                                   # mini scale (default), report/mini/index.html
#   snakemake --cores N --configfile config/paper.yaml    # paper scale
from snakemake.utils import min_version, validate

from resrepro.config_types import coerce_overrides, validate_refinements
from resrepro.plugins import use as use_variant_modules
from resrepro.preload import start_server, stop_server

min_version("9.0")


# The default scale, unless a scale profile is given (--configfile): a profile is a whole config,
# not a patch over mini.yaml (Snakemake would merge nested keys, e.g. mini's table_seeds, into it).
if not workflow.overwrite_configfiles:

    configfile: "config/mini.yaml"


# Nested --config values arrive as strings: give them the schema's types before validating.
coerce_overrides(config, "workflow/schemas/config.schema.yaml")


validate(config, "workflow/schemas/config.schema.yaml")
validate_refinements(config, "workflow/schemas/config.schema.yaml")
if config.get("variant_modules"):  # residual variants from files outside the package (src/resrepro/plugins.py)
    use_variant_modules(config["variant_modules"])


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        report_target(),


onstart:
    # The mini scale's ~200 short CPU jobs would each import torch (2-5 s): one process does it
    # once. Local runs only: a cluster's jobs run elsewhere, each in its own allocation.
    if config["preload_cpu_jobs"] and config["gpus_per_job"] == 0 and workflow.local_exec:
        start_server()


onsuccess:
    stop_server()


onerror:
    stop_server()
    # With keep-going every other job still ran; the report needs every result, so say how to
    # see what finished (failed cells listed) and that a plain rerun retries and resumes.
    print(
        "\nresrepro: some jobs failed (see their logs above). `snakemake` again retries them; training"
        " resumes from its last checkpoint. For a report of what finished, failed runs listed:\n"
        "  snakemake <your options> --config partial=true\n"
    )

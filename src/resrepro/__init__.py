"""resrepro: reproduces four papers on residual connections as one Snakemake pipeline."""

__version__ = "0.1.0"

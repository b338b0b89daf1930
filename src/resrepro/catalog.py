"""Every name a config may use, declared without torch: residual variants and their arguments,
architectures and their sizes, measurements and their settings.

Snakemake parses the workflow on every call (a no-op rerun, a dry run of the paper scale) and
checks the whole config then: every table row's variant and args, every figure's measurement and
settings. Importing torch for that would cost seconds each time, so what the checks need lives
here, and the implementations register against it: `residual.register("xskip")` takes its
arguments from VARIANTS["xskip"], `models.registry.register("preact_resnet")` its sizes from
ARCHITECTURES, `measure.register` its settings from MEASUREMENTS. Each refuses a name not declared
here, and tests/test_registry.py checks that every declared name is implemented.

Adding a variant: its arguments here (one line), its class in residual.py (the formula).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


class ConfigError(ValueError):
    """A bad name or value in the config; the message names the key and what is allowed."""


@dataclass(frozen=True)
class Param:
    """One argument of a variant: its type, default, and the rule a value must satisfy."""

    kind: type
    default: Any
    check: Callable[[Any], bool] = lambda v: True
    rule: str = ""  # says in words what `check` demands, for error messages


def _positive(v) -> bool:
    return v > 0


_LAM = Param(float, 1.0, _positive, "a number > 0")  # lambda of paper 001 Eq. (1)-(3)
_K = Param(float, 1.0, _positive, "a number > 0")  # the factor on F of paper 001 Table 3

# Each residual variant's arguments (a table row's `args`), by name; formulas in residual.py.
VARIANTS: dict[str, dict[str, Param]] = {
    "plain": {},
    "add": {},
    "xskip": {"lam": _LAM},
    "xskip_ln": {"lam": _LAM},
    "xskip_bn": {"lam": _LAM},
    "scale_f": {"k": _K},
    "ln_scale_f": {"k": _K},
    "rskip_ln": {"lam": Param(int, 1, lambda v: v >= 1, "an integer >= 1")},  # "no smaller than one"
    "rskip_bn": {"lam": Param(int, 1, lambda v: v >= 1, "an integer >= 1")},
    "wskip_ln": {"init": Param(float, 1.0, rule="a number")},
    "sas": {
        "norm": Param(str, "ln", lambda v: v in ("ln", "bn"), "one of ln, bn"),
        "gate": Param(str, "full", lambda v: v in ("full", "single", "transform"), "one of full, single, transform"),
        "gamma": Param(str, "tied", lambda v: v in ("tied", "free"), "one of tied, free"),
        "bias_a": Param(float, 3.0, rule="a number"),
        "bias_b": Param(float, -3.0, rule="a number"),
        "bias_gamma": Param(float, -3.0, rule="a number"),
    },
    "highway": {"bias": Param(float, -3.0, rule="a number")},
    # beyond the papers (issue 16): what came after them, one entry each (residual.py gives the sources)
    "pre_ln": {},
    "rezero": {},
    "skipinit": {"init": Param(float, None, rule="a number, or null for 1/sqrt(d)")},
    "layerscale": {"init": Param(float, None, _positive, "a number > 0, or null for CaiT's value at this depth")},
    "deepnorm": {},
    "admin": {},
}

# Variants that need what only the model knows (its depth, its branch's input and weights, one
# forward pass at initialisation): only architectures with `places_residuals` build them (residual.Place).
PLACED_VARIANTS = frozenset({"pre_ln", "skipinit", "layerscale", "deepnorm", "admin"})


def _coerce(key: str, p: Param, given, where: str):
    if given is None and p.default is None:  # an optional argument left to its variant's rule
        return None
    value, ok_type = given, isinstance(given, p.kind) and not isinstance(given, bool)
    if p.kind is float and isinstance(given, int) and not isinstance(given, bool):
        value, ok_type = float(given), True
    if not ok_type or not p.check(value):
        raise ConfigError(f"{where}: {key}={given!r} is invalid; expected {p.rule or p.kind.__name__}")
    return value


def validate(name: str, args: dict | None = None, where: str = "variant") -> dict:
    """Return the full argument dict of a variant (defaults filled in) or raise ConfigError."""
    if name not in VARIANTS:
        raise ConfigError(f"{where}: unknown variant {name!r}; allowed: {', '.join(sorted(VARIANTS))}")
    params = VARIANTS[name]
    args = dict(args or {})
    unknown = sorted(set(args) - set(params))
    if unknown:
        allowed = ", ".join(params) or "none"
        raise ConfigError(f"{where}: {name} has no argument {unknown[0]!r}; allowed: {allowed}")
    return {k: _coerce(k, p, args.get(k, p.default), f"{where} ({name})") for k, p in params.items()}


def variant_id(name: str, args: dict | None = None) -> str:
    """A short, stable, path-safe id: the name plus every argument that differs from its default,
    e.g. "xskip_ln-lam2", "sas-normbn", "add"."""
    full = validate(name, args)
    parts = [name]
    for k, p in VARIANTS[name].items():
        if full[k] != p.default:
            v = full[k]
            text = str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)  # full precision: ids must not collide
            parts.append(f"{k}{text}")
    return "-".join(parts)


@dataclass(frozen=True)
class Architecture:
    name: str
    task: str  # classification, translation or captioning: which tables may name it
    size_key: str  # the table row's key that picks the size: depth, size
    run_name: str  # the run's arch folder from the scale's size, e.g. "preact_resnet{}" -> preact_resnet110
    run_keys: tuple[str, ...]  # what a model spec copies from the run's training spec (optional if absent)
    places_residuals: bool = False  # tells each residual its Place and applies its hooks: builds PLACED_VARIANTS
    # `compile: auto` replays its step as CUDA graphs on a GPU; not the weight-shared nets, which
    # trained otherwise as graphs than eagerly in the GPU tests (an H200, 2026-11-27)
    replays_graphs: bool = True


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("preact_resnet", "classification", "depth", "preact_resnet{}", ("depth", "variant", "args", "init"), places_residuals=True),
        Architecture("transformer", "translation", "size", "transformer_{}", ("size", "variant", "args", "pad_id", "dropout"),
                     places_residuals=True),
        # paper 003's nets for its per-block analyses (models/iter_resnets.py); sizes: "paper", "mini"
        Architecture("single_rep_resnet", "classification", "size", "single_rep_resnet_{}", ("size", "variant", "args")),
        Architecture("avgpool_resnet", "classification", "size", "avgpool_resnet_{}", ("size", "variant", "args")),
        Architecture("wide_resnet", "classification", "size", "wide_resnet_{}", ("size", "variant", "args")),
        # paper 003 Sec. 4.5: PreAct-ResNets sharing their top blocks, one per BN strategy
        # (models/shared_resnet.py); sizes: the paper's depth "110", "146", "182", or "mini110", ...; `init` as preact_resnet's
        *(Architecture(f"shared_resnet_{s}", "classification", "size", f"shared_resnet_{s}_{{}}", ("size", "variant", "args", "init"),
                       replays_graphs=False)
          for s in ("naive", "stats", "stats_gamma", "ubn")),
        # paper 002's simplified nets, plain or residual (models/simple_net.py); depth 3n+2; `init` from the recipe
        Architecture("simple_net", "classification", "depth", "simple_net{}", ("depth", "variant", "args", "init")),
        Architecture("simple_net_diagonal", "classification", "depth", "simple_net_diagonal{}", ("depth", "variant", "args", "init")),
        # paper 002's fully fledged ResNet-20 and its plain counterpart: He et al. 2016a's CIFAR net (models/resnet_cifar.py)
        Architecture("resnet_cifar", "classification", "depth", "resnet_cifar{}", ("depth", "variant", "args")),
        # paper 000 Table 5: the Transformer captioner over image features (models/captioner.py); sizes: paper, mini
        Architecture("transformer_captioner", "captioning", "size", "captioner_{}", ("size", "variant", "args", "pad_id", "dropout"),
                     places_residuals=True),
    )
}
DEFAULT_FOR_TASK = {"classification": "preact_resnet", "translation": "transformer", "captioning": "transformer_captioner"}  # a row without `arch:`
# The positions the Transformer and the captioner hold a sinusoid table for (models/transformer.py).
# Every side of a training example (tokens with EOS or BOS) fits them: a recipe's max_train_len may
# lower this, not exceed it (experiments.check_recipe). Decoding computes positions past them.
MAX_POSITIONS = 1024


def check_placed(variant: str, arch: Architecture, where: str) -> None:
    """A variant of PLACED_VARIANTS is built only by an architecture that places its residuals."""
    if variant in PLACED_VARIANTS and not arch.places_residuals:
        placing = ", ".join(a.name for a in ARCHITECTURES.values() if a.places_residuals)
        raise ConfigError(f"{where}: variant {variant!r} needs its model's depth and hooks, which {arch.name} does not supply; "
                          f"architectures that do: {placing}")


def architecture(name: str, task: str | None = None) -> Architecture:
    allowed = [a for a, arch in ARCHITECTURES.items() if task is None or arch.task == task]
    if name not in allowed:
        raise ConfigError(f"architecture {name!r} unknown{f' for {task}' if task else ''}; allowed: {', '.join(allowed)}")
    return ARCHITECTURES[name]


@dataclass(frozen=True)
class MeasurementSpec:
    name: str
    task: str | None  # whose runs it reads: classification or translation; None: computed, no run (its cells name curves)
    kind: str  # the tidy frame's shape, which picks the report's drawing (report/figures.py DRAWINGS): per_block, per_epoch
    defaults: dict  # its settings and their defaults; a figure may set each
    module: str  # the module of resrepro.measure that implements it (measure.register), imported on first use
    quantities: tuple[str, ...] = ()  # the quantities it writes where a figure may draw some of them (`quantities:`)


MEASUREMENTS: dict[str, MeasurementSpec] = {
    m.name: m
    for m in (
        # paper 000 Fig. 3: "averaging over 10,000 experimental examples" (CIFAR-10's test set)
        MeasurementSpec("sas_gates", "classification", "per_block", {"examples": 10000, "split": "test", "batch_size": 500, "blocks": "all"}, "gates"),
        # paper 003 Sec. 4.1-4.2, on training and held-out data (measure/blocks.py)
        MeasurementSpec("l2_ratio", "classification", "per_block", {"examples": 10000, "splits": ["train", "test"], "batch_size": 500}, "blocks"),
        # Sec. 4.2: "make predictions using the rest of network on validation set"
        MeasurementSpec("block_drop", "classification", "per_block", {"examples": 10000, "splits": ["test"], "batch_size": 500}, "blocks"),
        MeasurementSpec("grad_cosine", "classification", "per_block", {"examples": 10000, "splits": ["train", "test"], "batch_size": 500}, "blocks"),
        # paper 000 Fig. 4 and paper 001 Fig. 3: "averaged over 10,000 random training examples",
        # the blocks "at the middle of the model" (the middle stage)
        MeasurementSpec("grad_norm", "classification", "per_block",
                        {"examples": 10000, "splits": ["train"], "batch_size": 500, "blocks": "middle"}, "blocks"),
        # paper 003 Fig. 6 and Sec. 4.3: borderline examples over the last 5 blocks (measure/borderline.py)
        MeasurementSpec("borderline", "classification", "per_block",
                        {"examples": 10000, "splits": ["train", "test"], "batch_size": 500, "last_blocks": 5, "margin": 0.1}, "borderline"),
        # paper 001 Fig. 4: a run's learning curves, from its training log (measure/curves.py)
        MeasurementSpec("learning_curve", "classification", "per_epoch", {"quantities": ["train_loss", "test_loss"]}, "curves"),
        # paper 001, "Learning lambda": the norm of wSkip+LN's learned w per block
        MeasurementSpec("skip_weight", "classification", "per_block", {"blocks": "middle"}, "blocks"),
        # paper 001 Sec. 4.1: "the learned effective scale ... averaged over the shown blocks"
        # (Figure 3's middle blocks, its 10,000 training examples; measure/skip_scale.py)
        MeasurementSpec("skip_scale", "classification", "per_block", {"examples": 10000, "splits": ["train"], "batch_size": 500, "blocks": "middle"}, "skip_scale"),
        # paper 003 Sec. 4.4, Figs. 7 and 20: the last block unrolled "for 20 extra steps" with a
        # scaling factor whose value the paper does not give (measure/unroll.py)
        MeasurementSpec("unroll", "classification", "per_step",
                        {"examples": 10000, "splits": ["train", "test"], "batch_size": 500, "steps": 20, "scale": 0.05, "margin": 0.1}, "unroll"),
        MeasurementSpec("unroll_blocks", "classification", "per_block",
                        {"examples": 10000, "splits": ["train", "test"], "batch_size": 500, "steps": 20, "scale": 0.05}, "unroll"),
        # paper 003 Sec. 4.5, Figs. 8-9: gradient and activation norms of shared nets over training
        # (measure/stage_norms.py), "on train (solid line) and validation data (dashed line)"
        MeasurementSpec("stage_norms", "classification", "per_epoch", {"examples": 10000, "splits": ["train", "test"], "batch_size": 500}, "stage_norms"),
        # paper 003 Figs. 5, 13-17: the last stage's blocks "on validation during the training
        # process", on the snapshots a run kept (measure/over_training.py)
        MeasurementSpec("over_training", "classification", "per_epoch_block", {"examples": 10000, "splits": ["test"], "batch_size": 500}, "over_training",
                        ("accuracy (%), classifier after the block", "cos(F(h), dL/dh), classifier after the block", "||F(h)|| / ||h||")),
        # paper 002 SM Tables 3-4: weight masses, training risk and the weight-decay term at each
        # snapshot (measure/weights.py); the risk over the whole training set (CIFAR-10: 50,000)
        MeasurementSpec("weight_stats", "classification", "per_epoch", {"examples": 50000, "batch_size": 500, "large": 0.25}, "weights",
                        ("risk", "decay term", "mean", "std", "mass, all", "mass, |w| > 0.25", "mass, ID entries",
                         "ID mass / mass |w| > 0.25 (%)")),
        # paper 002 SM D, Fig. 8 (b): the test error where a run's training loss first reaches each level (measure/curves.py)
        MeasurementSpec("error_at_loss", "classification", "per_level", {"levels": [1.0, 0.5, 0.3, 0.2, 0.1, 0.05]}, "curves"),
        # paper 002 SM C, Fig. 7: histograms of the weights and of the ID entries (measure/weights.py)
        MeasurementSpec("weight_histogram", "classification", "histogram", {"bins": 60, "low": -1.5, "high": 1.5}, "weights"),
        # paper 002 Sec. 4.2, Fig. 3: the per-sample layer cushion of each block "for any data point
        # in the training set" (Arora et al. 2018; measure/cushion.py)
        MeasurementSpec("layer_cushion", "classification", "per_block", {"examples": 50000, "splits": ["train"], "batch_size": 500}, "cushion"),
        # SM D.4, Fig. 10: the distribution of the final activation and of the loss's gradient there
        MeasurementSpec("final_activations", "classification", "histogram",
                        {"examples": 50000, "split": "train", "batch_size": 500, "bins": 60, "range": 5.0}, "cushion"),
        # SM D.4.2, Fig. 12: the fraction of dominant gradient flow per layer, "averaged over all
        # training samples in a mini-batch" (the paper's batch: 128; measure/dominant_flow.py)
        MeasurementSpec("dominant_flow", "classification", "per_block", {"examples": 128}, "dominant_flow"),
        # Sec. 4.2: the interlayer cushion of each block of the fully fledged nets (measure/cushion.py)
        MeasurementSpec("interlayer_cushion", "classification", "per_block", {"examples": 10000, "splits": ["train"], "batch_size": 500, "probes": 16}, "cushion"),
        # Appendix E, Fig. 13: P(|X| > |Y|) of two zero-mean Gaussians against the ratio of their
        # deviations, in closed form and simulated (measure/gaussian.py); no run
        MeasurementSpec("gaussian_inequality", None, "per_ratio", {"low": 0.01, "high": 100.0, "points": 41, "samples": 200000, "seed": 0}, "gaussian"),
        # SM D.4.1, Fig. 11 (d), (e): the fraction of dominant gradient flow in the trivial case (1 x 1
        # kernels, 1-D activations), simulated, against the std of the final gradients and against
        # the ReLUs' probability p of passing (measure/trivial_flow.py); no run. The fixed values are
        # lost in our copy; chosen (docs/noise.md): n = 16 entries, 2 layers above the measured one,
        # p = 1/2 in (d), s = 1 in (e), 2,000 draws a point
        MeasurementSpec("trivial_flow_scale", None, "per_gradient_std",
                        {"n": 16, "layers": 2, "p": 0.5, "low": 0.01, "high": 100.0, "points": 9, "draws": 2000, "seed": 0}, "trivial_flow"),
        MeasurementSpec("trivial_flow_p", None, "per_p", {"n": 16, "layers": 2, "gradient_std": 1.0, "points": 11, "draws": 2000, "seed": 0}, "trivial_flow"),
    )
}


def measurement(name: str) -> MeasurementSpec:
    if name not in MEASUREMENTS:
        raise ConfigError(f"measurement {name!r} unknown; allowed: {', '.join(MEASUREMENTS)}")
    return MEASUREMENTS[name]


def snapshot_name(epoch: float) -> str:
    """A snapshot's name, in a legend or a summary: its epoch, or the weights after the first step
    (a fraction of the first epoch: train/classification.py keeps them for paper 002's "after the
    first iteration")."""
    return "after the first step" if 0 < epoch < 1 else f"epoch {epoch:g}"


def settings_for(name: str, given: dict | None, where: str) -> dict:
    """The measurement's defaults with a figure's settings over them; an unknown key is refused."""
    m = measurement(name)
    given = given or {}
    if unknown := set(given) - set(m.defaults):
        raise ConfigError(f"{where}: {name} has no setting {sorted(unknown)[0]!r}; allowed: {sorted(m.defaults)}")
    return {**m.defaults, **given}

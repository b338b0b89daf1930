"""Recipes per paper, dataset, size and table (recipes.py): which refinements a run gets, where its
results live, what retrains and what only re-evaluates, and the config checks on the result."""

import copy
import json

import pytest
import yaml
from fake_runs import CONFIG

from resrepro import experiments, recipes
from resrepro.config_types import validate_refinements
from resrepro.models import model_spec
from resrepro.models.transformer import TransformerConfig
from resrepro.residual import ConfigError

SCHEMA = "workflow/schemas/config.schema.yaml"


def load(*paths):
    config = {}
    for path in paths:
        with open(path) as f:
            config.update(yaml.safe_load(f))  # top-level keys, as paper.yaml sets every one
    return config


@pytest.fixture
def mini():
    return load(f"{CONFIG}/mini.yaml")


@pytest.fixture
def paper():
    """The project's own paper scale: the tests that read it check its recipes (marked `config`)."""
    return load("config/mini.yaml", "config/paper.yaml")


def refinement(name, when, set_, source="a sentence"):
    return {"name": name, "when": when, "set": set_, "source": source}


def test_matches_a_scalar_a_list_and_depths_as_text():
    cell = {"paper": "rskip", "table": "rskip-t7", "dataset": "wmt14_en_de", "size": "big"}
    assert recipes.matches({"paper": "rskip"}, cell)
    assert recipes.matches({"paper": "rskip", "dataset": ["iwslt15_en_vi", "wmt14_en_de"]}, cell)
    assert not recipes.matches({"paper": "rskip", "dataset": ["iwslt15_en_vi"]}, cell)  # every key must hold
    assert not recipes.matches({"size": "base"}, cell)
    assert not recipes.matches({"depth": 110}, cell)  # a key the cell lacks never matches
    assert recipes.matches({"depth": 110}, {"depth": "110"}) and recipes.matches({"depth": ["110"]}, {"depth": 110})


def test_resolve_applies_matching_refinements_in_order_and_names_them():
    task = {"datasets": {}, "sizes": {}, "seeds": 2, "gpus": {}, "max_updates": 100, "beam": 4,
            "refine": [refinement("first", {"paper": "p"}, {"max_updates": 200, "beam": 5}),
                       refinement("other", {"paper": "q"}, {"max_updates": 999}),
                       refinement("second", {"size": "big"}, {"max_updates": 300})]}
    assert recipes.resolve(task, {"paper": "p", "size": "big"}) == ("first+second", {"max_updates": 300, "beam": 5})
    assert recipes.resolve(task, {"paper": "p", "size": "base"}) == ("first", {"max_updates": 200, "beam": 5})
    assert recipes.resolve(task, {"paper": "r", "size": "base"}) == ("default", {"max_updates": 100, "beam": 4})
    assert task["max_updates"] == 100  # the config itself is left as it was


def test_training_and_evaluation_keys_split_the_recipe(mini):
    recipe = recipes.resolve(mini["translation"], {})[1]
    train, evaluation = recipes.training_part("translation", recipe), recipes.evaluation_part("translation", recipe)
    assert set(evaluation) == {"average_last", "beam", "alpha", "max_len_a", "max_len_b"}
    assert set(train) | set(evaluation) == set(recipe) and not set(train) & set(evaluation)
    assert recipes.evaluation_part("classification", {"epochs": 3}) == {}


def test_specs_of_a_run_keep_evaluation_apart_from_training(mini):
    plan = experiments.make_plan(mini)
    run = next(r for r in plan.runs.values() if r.task == "translation")
    train, evaluation = experiments.train_spec(mini, run), experiments.eval_spec(run)
    assert not {"beam", "alpha", "max_len_a", "max_len_b", "average_last"} & set(train.to_dict())
    assert (evaluation.beam, evaluation.average_last) == (mini["translation"]["beam"], mini["translation"]["average_last"])
    # evaluation rebuilds the model the training spec names
    shared = {"size", "variant", "args", "pad_id", "bos_id", "eos_id"}
    assert {k: getattr(train, k) for k in shared} == {k: getattr(evaluation, k) for k in shared}
    changed = copy.deepcopy(mini)
    changed["translation"]["beam"] = 8
    run2 = experiments.make_plan(changed).runs[run.path]
    assert experiments.train_spec(changed, run2) == train and experiments.eval_spec(run2).beam == 8


def _row_runs(plan, table_id):
    return {r["label"]: r["runs"] for r in plan.rows if r["table"] == table_id}


def test_one_papers_equal_cells_train_once_and_another_papers_protocol_gets_its_own_folder(mini):
    """rskip-t2, t5 and t7 name the EN-VI base 2rSkip+LN cell alike: one set of runs. With paper
    001's own step count for EN-VI, SAS's EN-VI base baseline (the same variant) no longer shares
    paper 001's runs: their training specs differ, and so do their folders."""
    before = experiments.make_plan(mini)
    t2, t7, sas = _row_runs(before, "rskip-t2"), _row_runs(before, "rskip-t7"), _row_runs(before, "sas-t3")
    assert t2["2rSkip+LN"] == t7["EN-VI Base + proposal"]
    assert t2["Baseline"][:len(sas["EN-VI Base"])] == sas["EN-VI Base"]  # shared at mini: one recipe (sas-t3 reads its first seeds)

    cfg = copy.deepcopy(mini)
    cfg["translation"]["refine"] = [refinement("rskip-long", {"paper": "rskip", "dataset": "iwslt15_en_vi"}, {"max_updates": 900})]
    plan = experiments.make_plan(cfg)
    t2, t5, t7, sas = (_row_runs(plan, t) for t in ("rskip-t2", "rskip-t5", "rskip-t7", "sas-t3"))
    assert t2["2rSkip+LN"] == t5["2rSkip+LN, 6 blocks"] == t7["EN-VI Base + proposal"]  # still one cell in paper 001
    assert not set(t2["Baseline"]) & set(sas["EN-VI Base"])
    rskip_run, sas_run = plan.runs[t2["Baseline"][0]], plan.runs[sas["EN-VI Base"][0]]
    assert rskip_run.path == "translation/synthetic/transformer_mini_base/rskip-long/xskip_ln/seed0"
    assert sas_run.path == "translation/synthetic/transformer_mini_base/default/xskip_ln/seed0"
    assert experiments.train_spec(cfg, rskip_run).max_updates == 900 and experiments.train_spec(cfg, sas_run).max_updates == 600
    assert all(plan.runs[p].recipe == "default" for p in sas["EN-DE Base"])
    # every run folder holds exactly one recipe
    by_path = {}
    for run in plan.runs.values():
        assert by_path.setdefault(run.path, run.recipe_json) == run.recipe_json


def test_a_table_refinement_separates_that_tables_runs_only(mini):
    cfg = copy.deepcopy(mini)
    cfg["classification"]["refine"] = [refinement("t3-short", {"table": "rskip-t3"}, {"epochs": 10, "lr_milestones": [5]})]
    plan = experiments.make_plan(cfg)
    t1, t3 = _row_runs(plan, "rskip-t1"), _row_runs(plan, "rskip-t3")
    assert t1["1xSkip"] != t3["x + F"]  # the same add cell, trained as each table says
    run = plan.runs[t3["x + F"][0]]
    assert run.recipe == "t3-short" and experiments.train_spec(cfg, run).epochs == 10
    assert experiments.train_spec(cfg, plan.runs[t1["1xSkip"][0]]).epochs == mini["classification"]["epochs"]


def test_a_figure_cell_that_a_table_names_is_that_tables_run_snapshots_included(mini):
    """mini: every classification run keeps its snapshots (the base recipe), so paper 003's
    figures read the very run that its Table 1 trains for ResNet-110: one training, whose weights
    over training the figures measure. Paper 001's ResNet-110 is another net (He et al.'s init, no
    conv biases: refinement iter-init), so another run. A refinement of kind table would have
    matched the table and not the figure."""
    plan = experiments.make_plan(mini)
    t1, rskip = _row_runs(plan, "iter-t1"), _row_runs(plan, "rskip-t1")
    assert not set(t1["ResNet-110, CIFAR-10"]) & set(rskip["1xSkip"])
    assert all("/iter-init/" in run for run in t1["ResNet-110, CIFAR-10"]) and len(t1["ResNet-110, CIFAR-10"]) == mini["table_seeds"]["iter-t1"]
    (figure_cell,) = [m for m in plan.measures if m["figure"] == "iter-f5" and m["label"] == "original ResNet-110"]
    assert figure_cell["runs"][0] in t1["ResNet-110, CIFAR-10"]
    assert experiments.train_spec(mini, plan.runs[figure_cell["runs"][0]]).snapshots == 3
    assert recipes.matches({"kind": "table"}, {"kind": "table"}) and not recipes.matches({"kind": "table"}, {"kind": "figure"})


@pytest.mark.config
def test_paper_config_states_each_papers_translation_protocol(paper):
    validate_refinements(paper, SCHEMA)
    plan = experiments.make_plan(paper)

    def specs(table_id, label):
        run = plan.runs[_row_runs(plan, table_id)[label][0]]
        return run, experiments.train_spec(paper, run), experiments.eval_spec(run)

    run, train, evaluation = specs("rskip-t7", "EN-DE Base + proposal")
    assert (train.max_tokens * train.world_size, train.max_updates, evaluation.average_last) == (16384, 550000, 5)
    assert run.recipe == "rskip-wmt+rskip-avg5"
    run, train, evaluation = specs("rskip-t7", "EN-FR Big")
    assert (train.max_updates, evaluation.average_last, train.keep_checkpoints, train.dropout) == (550000, 20, 20, 0.1)
    assert TransformerConfig.from_spec(model_spec(train, vocab_size=100)).dropout == 0.1
    run, train, evaluation = specs("sas-t3", "EN-DE Big")
    assert (train.max_tokens * train.world_size, train.max_updates, evaluation.average_last) == (25000, 300000, 10)
    assert "dropout" not in train.to_dict() and TransformerConfig.from_spec(model_spec(train, vocab_size=100)).dropout == 0.3  # the big preset's
    run, train, evaluation = specs("sas-t3", "EN-VI Base")
    assert (run.recipe, train.max_tokens, train.world_size, train.max_updates, evaluation.average_last) == ("default", 4096, 1, 100000, 10)
    classification = next(r for r in plan.runs.values() if r.arch_dir == "preact_resnet20")
    spec = experiments.train_spec(paper, classification)
    assert (spec.warmup_iterations, spec.warmup_min_depth) == (400, 0)  # He et al. 2016b: every CIFAR depth
    for refined in paper["translation"]["refine"]:
        assert refined["source"].strip()


@pytest.mark.config
def test_paper_scales_drop_training_pairs_over_256_subwords_and_mini_keeps_its_specs(mini, paper):
    """tensor2tensor's transformer_base max_length at paper and gpu-day scale; mini leaves the key
    out (no synthetic pair is that long), so its runs' specs, and their results, stay as they were."""
    for config in (paper, load("config/mini.yaml", "config/gpu-day.yaml")):
        plan = experiments.make_plan(config)
        specs = [experiments.train_spec(config, run) for run in plan.runs.values() if run.task == "translation"]
        assert specs and all(spec.max_train_len == 256 for spec in specs)
    plan = experiments.make_plan(mini)
    assert not any("max_train_len" in experiments.train_spec(mini, run).to_dict() for run in plan.runs.values())


@pytest.mark.parametrize(
    "task, refine, message",
    [
        ("translation", [refinement("a", {"paper": "rskip"}, {"beam": 5}), refinement("a", {"paper": "sas"}, {"beam": 6})],
         "translation.refine[1]: name 'a' is used twice or reserved"),
        ("translation", [refinement("default", {"paper": "sas"}, {"beam": 6})], "name 'default' is used twice or reserved"),
        ("translation", [refinement("a", {"paper": "rskip", "depthh": 3}, {"beam": 5})], "translation.refine[0].when: unknown key 'depthh'"),
        ("translation", [refinement("a", {"paper": "rskip"}, {"beams": 5})], "translation.refine[0].set: 'beams' is not a key of the translation recipe"),
        ("classification", [refinement("a", {"paper": "rskip"}, {"dropout": 0.1})], "'dropout' is not a key of the classification recipe"),
    ],
)
def test_bad_refinements_fail_naming_the_entry(mini, task, refine, message):
    cfg = copy.deepcopy(mini)
    cfg[task]["refine"] = refine
    with pytest.raises(ConfigError) as err:
        experiments.make_plan(cfg)
    assert message in str(err.value)


def test_a_refinements_values_are_checked_by_the_schema(mini):
    cfg = copy.deepcopy(mini)
    cfg["translation"]["refine"] = [refinement("rskip-wmt", {"paper": "rskip"}, {"max_updates": 0})]
    with pytest.raises(ConfigError) as err:
        validate_refinements(cfg, SCHEMA)
    assert "translation.refine[0] (rskip-wmt).set: 0 is less than the minimum of 1" in str(err.value)
    cfg["translation"]["refine"] = [refinement("rskip-wmt", {"paper": "rskip"}, {"max_updates": 9})]
    validate_refinements(cfg, SCHEMA)


@pytest.mark.parametrize(
    "task, change, message",
    [
        ("classification", {"lr_milestones": [9, 6]}, "classification.lr_milestones [9, 6] must be strictly increasing"),
        ("classification", {"lr_milestones": [6, 6]}, "must be strictly increasing"),
        ("classification", {"epochs": 12, "lr_milestones": [6, 12]}, "lr_milestones [6, 12] must lie within the 12 epochs (epoch 12 is never reached)"),
        ("translation", {"average_last": 11}, "translation.average_last (11) exceeds keep_checkpoints (3)"),
        ("translation", {"max_updates": 420, "checkpoint_every": 50, "average_last": 10, "keep_checkpoints": 10},
         "translation.average_last (10) exceeds the 9 checkpoints that max_updates 420 at checkpoint_every 50 writes"),
        ("translation", {"max_train_len": 1025}, "translation.max_train_len 1025 exceeds the 1024 positions the model holds"),
        ("translation", {"max_train_len": 1020, "length_bucket": 24},
         "translation.max_train_len 1020 (padded to length_bucket 24: 1032) exceeds the 1024 positions the model holds"),
        ("translation", {"compile": "cudagraphs"}, "translation.compile 'cudagraphs' replays a CUDA graph recorded for each batch shape"),
        ("translation", {"compile": "reduce-overhead", "length_bucket": 0}, "set length_bucket"),
    ],
)
def test_recipes_that_would_silently_go_wrong_are_refused(mini, task, change, message):
    cfg = copy.deepcopy(mini) | {"tables": ["rskip-t1", "rskip-t2"], "figures": []}  # tables of the default recipe
    cfg[task].update(change)
    with pytest.raises(ConfigError) as err:
        experiments.make_plan(cfg)
    assert message in str(err.value)
    assert "recipe default" in str(err.value)  # names the refinements that made the recipe


@pytest.mark.parametrize("mode", ["cudagraphs", "reduce-overhead", "max-autotune"])
def test_captioning_refuses_graph_replays_which_would_record_a_graph_per_caption_length(mini, mode):
    cfg = copy.deepcopy(mini) | {"tables": ["sas-t5"], "figures": []}
    cfg["captioning"]["compile"] = mode
    with pytest.raises(ConfigError, match=f"captioning.compile '{mode}' replays a CUDA graph recorded for each batch shape"):
        experiments.make_plan(cfg)
    cfg["captioning"]["compile"] = "max-autotune-no-cudagraphs"
    experiments.make_plan(cfg)


def test_the_edges_of_the_recipe_checks_pass(mini):
    cfg = copy.deepcopy(mini)
    cfg["classification"].update(epochs=12, lr_milestones=[1, 11])  # the last epoch is index 11 of 12
    cfg["translation"].update(max_updates=450, checkpoint_every=250, average_last=2, keep_checkpoints=2)  # 250 and 450: both
    experiments.make_plan(cfg)
    cfg["translation"].update(max_updates=401)  # 250 and the last update, 401
    experiments.make_plan(cfg)
    cfg["translation"].update(max_updates=600, checkpoint_every=50, average_last=6, keep_checkpoints=6, warmup=349)  # from 350: after both
    experiments.make_plan(cfg)
    cfg["classification"]["lr_milestones"] = []
    experiments.make_plan(cfg)
    cfg["translation"].update(max_train_len=1024)  # every position the model holds
    experiments.make_plan(cfg)
    cfg["translation"].update(max_train_len=1020, length_bucket=12)  # padded to 1,020
    experiments.make_plan(cfg)
    cfg["translation"].update(compile="cudagraphs")  # few shapes: a graph each
    experiments.make_plan(cfg)
    cfg["translation"].update(compile="inductor", length_bucket=0)  # no graph replayed
    experiments.make_plan(cfg)


def test_a_refined_recipe_is_checked_too(mini):
    cfg = copy.deepcopy(mini)
    cfg["translation"]["refine"] = [refinement("avg20", {"size": "big"}, {"average_last": 20})]
    with pytest.raises(ConfigError) as err:
        experiments.make_plan(cfg)
    assert "(recipe avg20): translation.average_last (20) exceeds keep_checkpoints (3)" in str(err.value)


def test_depths_must_be_preact_resnet_depths(mini):
    cfg = copy.deepcopy(mini)
    cfg["classification"]["depths"][20] = 21
    with pytest.raises(ConfigError) as err:
        experiments.make_plan(cfg)
    assert "classification.depths: 21 is not a PreAct-ResNet depth; it must be 6n+2" in str(err.value)


def test_run_paths_name_the_recipe():
    run = experiments.Run("translation", "synthetic", "transformer_mini_base", "transformer", "mini_base", "rskip_ln", json.dumps({"lam": 2}), 1, "a+b")
    assert run.path == "translation/synthetic/transformer_mini_base/a+b/rskip_ln-lam2/seed1"


@pytest.mark.config
def test_paper_002s_equivalent_training_refines_its_table_2_by_variant(mini, paper):
    """noise-t2's plain rows start from the mapped residual init (variant: plain), all its rows run
    in float64; noise-t1's nets keep the paper 002 recipe alone. Each is a folder of its own."""
    for cfg in (mini, paper):
        plan = experiments.make_plan(cfg)
        t1, t2 = _row_runs(plan, "noise-t1"), _row_runs(plan, "noise-t2")
        plain, residual = plan.runs[t2["PlnNet-20 (equivalent), risk"][0]], plan.runs[t2["ResNet-20, risk"][0]]
        assert plain.recipe == "noise+noise-float64+noise-equivalent" and residual.recipe == "noise+noise-float64"
        assert experiments.train_spec(cfg, plain).init == "equivalent" and "init" not in experiments.train_spec(cfg, residual).to_dict()
        assert experiments.train_spec(cfg, residual).dtype == "float64"
        t1_run = plan.runs[t1["PlnNet-20, risk"][0]]
        assert t1_run.recipe == "noise" and "dtype" not in experiments.train_spec(cfg, t1_run).to_dict()
    assert experiments.train_spec(paper, t1_run).epochs == 200
    assert recipes.matches({"variant": "plain"}, {"variant": "plain"}) and not recipes.matches({"variant": "plain"}, {"variant": "add"})


@pytest.mark.config
@pytest.mark.parametrize("scale", ["config/mini.yaml", "config/gpu-day.yaml", "config/paper.yaml"])
def test_no_run_keeps_more_step_checkpoints_than_its_averaging_reads(scale):
    """Disk: a big Transformer's step checkpoint is about 0.8 GB. Each scale's recipes keep exactly
    the checkpoints their evaluation averages (a lower average_last on the command line stays an
    evaluation-only change)."""
    config = load(scale)
    plan = experiments.make_plan(config)
    sequence_runs = [run for run in plan.runs.values() if run.task in ("translation", "captioning")]
    assert sequence_runs
    for run in sequence_runs:
        assert experiments.train_spec(config, run).keep_checkpoints == experiments.eval_spec(run).average_last, run


# ------------------------------------ at_paper_size: some cells at the paper's size, the rest small


def _runs_by_row(plan):
    return {(r["table"], r["label"]): [plan.runs[path] for path in r["runs"]] for r in plan.rows}


def test_cells_at_paper_size_run_the_papers_size_and_the_others_the_scales_map(mini):
    cfg = copy.deepcopy(mini) | {"tables": ["rskip-t1", "rskip-t7"], "figures": []}
    cfg["translation"]["at_paper_size"] = [{"table": "rskip-t7", "dataset": "wmt14_en_de", "size": "big", "variant": "xskip_ln"}]
    cfg["classification"]["at_paper_size"] = [{"paper": "rskip", "variant": "rskip_ln", "depth": 110}]
    rows = _runs_by_row(experiments.make_plan(cfg))
    big = rows["rskip-t7", "EN-DE Big"]
    assert {(run.arch_dir, run.size) for run in big} == {("transformer_big", "big")}
    assert all("/transformer_big/" in run.path for run in big)
    assert experiments.train_spec(cfg, big[0]).size == experiments.eval_spec(big[0]).size == "big"
    for label in ("EN-DE Big + proposal", "EN-VI Big", "EN-DE Base"):  # the scale's map: big and base run as mini_base
        assert {(run.arch_dir, run.size) for run in rows["rskip-t7", label]} == {("transformer_mini_base", "mini_base")}, label
    assert {(run.arch_dir, run.size) for run in rows["rskip-t1", "2rSkip+LN"]} == {("preact_resnet110", 110)}
    assert {(run.arch_dir, run.size) for run in rows["rskip-t1", "2xSkip+LN"]} == {("preact_resnet32", 32)}  # mini: 110 -> 32
    assert experiments.train_spec(cfg, rows["rskip-t1", "3rSkip+LN"][0]).depth == 110


def test_at_paper_size_is_a_scale_key_not_part_of_the_recipe(mini):
    task = copy.deepcopy(mini["translation"]) | {"at_paper_size": [{"size": "big"}]}
    assert "at_paper_size" in recipes.SCALE_KEYS
    assert recipes.resolve(task, {"size": "big"}) == recipes.resolve(mini["translation"], {"size": "big"})
    assert recipes.at_paper_size(task, {"size": "big"}) and not recipes.at_paper_size(task, {"size": "base"})
    assert not recipes.at_paper_size(mini["translation"], {"size": "big"})  # absent: every cell at the scale's size


@pytest.mark.config
def test_the_paper_scales_size_maps_are_identities(paper):
    """What "the paper's size" is: config/paper.yaml runs every depth and size as itself, so a cell
    at_paper_size runs (and names its folder) as it does at the paper scale."""
    full = load("config/paper.yaml")
    for task, map_key in (("classification", "depths"), ("classification", "sizes"), ("translation", "sizes"), ("captioning", "sizes")):
        mapping = full[task][map_key]
        assert mapping and all(str(size) == str(runs_as) for size, runs_as in mapping.items()), (task, map_key)
    everything = {task: [{"kind": ["table", "figure"]}] for task in experiments.TASKS}
    at_paper = copy.deepcopy(paper)
    for task, when in everything.items():
        at_paper[task]["at_paper_size"] = when
    assert experiments.make_plan(at_paper).runs == experiments.make_plan(paper).runs


@pytest.mark.parametrize("task", ["classification", "translation", "captioning"])
def test_an_unknown_at_paper_size_key_is_refused_naming_it(mini, task):
    cfg = copy.deepcopy(mini)
    cfg[task]["at_paper_size"] = [{"paper": "sas"}, {"paper": "rskip", "sizes": "big"}]
    with pytest.raises(ConfigError) as err:
        experiments.make_plan(cfg)
    assert f"{task}.at_paper_size[1]: unknown key 'sizes'; allowed: paper, table, kind" in str(err.value)


def test_the_schema_takes_at_paper_size_as_a_list_of_matchers(mini):
    import jsonschema

    schema = yaml.safe_load(open(SCHEMA))
    for task in ("classification", "translation", "captioning"):
        block = {**schema["properties"][task], "$defs": schema["$defs"]}
        validator = jsonschema.Draft202012Validator(block)
        good = {**mini[task], "at_paper_size": [{"paper": "rskip", "depth": [110, "56"], "kind": "table"}]}
        assert not list(validator.iter_errors(good)), task
        for bad in ([{"sizes": "big"}], [{}], [{"kind": "row"}], {"paper": "rskip"}):
            assert list(validator.iter_errors({**mini[task], "at_paper_size": bad})), (task, bad)
        assert block["properties"]["at_paper_size"]["description"]


# ------------------------------------------- dev_sentences trains, test_sentences only re-evaluates


def test_dev_sentences_is_a_training_key_and_test_sentences_an_evaluation_key(mini):
    assert {"dev_sentences", "test_sentences"} <= recipes.OPTIONAL_KEYS["translation"]
    assert "test_sentences" in recipes.EVAL_KEYS["translation"] and "dev_sentences" not in recipes.EVAL_KEYS["translation"]
    recipe = recipes.resolve(mini["translation"], {})[1]
    assert recipes.training_part("translation", {**recipe, "test_sentences": 7}) == recipes.training_part("translation", recipe)
    assert recipes.evaluation_part("translation", {**recipe, "test_sentences": 7}) == {**recipes.evaluation_part("translation", recipe),
                                                                                       "test_sentences": 7}
    assert recipes.training_part("translation", {**recipe, "dev_sentences": 5})["dev_sentences"] == 5


def test_cutting_the_test_set_reevaluates_and_cutting_the_dev_set_retrains_in_the_same_folders(mini):
    cut = copy.deepcopy(mini)
    cut["translation"].update(dev_sentences=5, test_sentences=7)
    before, after = experiments.make_plan(mini), experiments.make_plan(cut)
    assert after.runs.keys() == before.runs.keys()  # absent or present, the folders are the same
    run = next(path for path, r in before.runs.items() if r.task == "translation")
    assert experiments.train_spec(cut, after.runs[run]) == experiments.train_spec(mini, before.runs[run]).replace(dev_sentences=5)
    assert experiments.eval_spec(after.runs[run]) == experiments.eval_spec(before.runs[run]).replace(test_sentences=7)
    refined = copy.deepcopy(mini)  # a refinement may set them, as any optional recipe key
    refined["translation"]["refine"] = [refinement("short-test", {"size": "big"}, {"test_sentences": 3, "dev_sentences": 2})]
    experiments.make_plan(refined)
    validate_refinements(refined, SCHEMA)
    refined["translation"]["refine"][0]["set"] = {"test_sentences": 0}
    with pytest.raises(ConfigError, match="test_sentences|0 is less than the minimum of 1"):
        validate_refinements(refined, SCHEMA)


@pytest.mark.config
@pytest.mark.parametrize("scale", ["mini", "gpu-day", "paper"])
def test_every_run_measured_on_its_snapshots_keeps_them(scale):
    """A measurement that reads a run's snapshots fails, after the training, on a run that kept
    none: at every scale each such run's recipe keeps them (Tables 2 and 5's risk rows read the
    float64 and diagonal nets' final snapshots). The rehearsal's config needs its mirror, which
    `make rehearsal` writes; its measure jobs run there."""
    from resrepro.analysis.cost import load_scale
    from resrepro.experiments import measured
    from resrepro.measure import get

    _, plan = load_scale(f"config/{scale}.yaml")
    asked = {(run, name) for run, name, _, _ in measured(plan)}
    on_snapshots = {run for run, name in asked if get(name).reads in ("snapshots", "first_step_and_end")}
    assert on_snapshots
    assert [run for run in sorted(on_snapshots) if not json.loads(plan.runs[run].recipe_json).get("snapshots")] == []


def test_the_averaged_updates_are_the_newest_checkpoints_a_captioners_self_critical_ones_last():
    assert recipes.checkpointed_updates(600, 50)[-3:] == [500, 550, 600]
    assert recipes.checkpointed_updates(25, 10) == [10, 20, 25]  # the last update too
    mt = {"max_updates": 600, "checkpoint_every": 50, "average_last": 3, "warmup": 200}
    assert recipes.averaged_updates("translation", mt) == [500, 550, 600]
    # 600 cross-entropy updates, then 100 self-critical ones checkpointed every 20: 620 ... 700
    cap = {**mt, "average_last": 5, "scst": {"updates": 100, "checkpoint_every": 20}}
    assert recipes.averaged_updates("captioning", cap) == [620, 640, 660, 680, 700]
    assert recipes.averaged_updates("captioning", {**cap, "average_last": 7}) == [550, 600, 620, 640, 660, 680, 700]
    assert recipes.averaged_updates("translation", cap) == [400, 450, 500, 550, 600]  # a translation recipe has no scst stage


@pytest.mark.parametrize("recipe, problem", [
    ({"average_last": 10}, "average_last 10 at checkpoint_every 50 averages updates 150-600, from within the warm-up of 200 updates"),
    ({"average_last": 8}, "average_last 8 at checkpoint_every 50 averages updates 250-600, from before the last 50% of the 600 updates"),
    ({"average_last": 7}, "average_last 7 at checkpoint_every 50 averages updates 300-600, from before the last 50% of the 600 updates"),
    ({"average_last": 6}, None),  # from 350
    ({"average_last": 3, "warmup": 500}, "average_last 3 at checkpoint_every 50 averages updates 500-600, from within the warm-up of 500 updates"),
    ({"average_last": 3, "warmup": 499}, None),
])
def test_an_average_that_reaches_into_the_warm_up_or_the_first_half_is_a_problem(recipe, problem):
    assert recipes.averaging_problem("translation", {"max_updates": 600, "checkpoint_every": 50, "warmup": 200, **recipe}) == problem


def test_a_captioners_average_counts_its_self_critical_updates():
    """600 + 100 updates: its 5 self-critical checkpoints (620-700) lie in the last half of 700."""
    cap = {"max_updates": 600, "checkpoint_every": 50, "average_last": 5, "warmup": 200, "scst": {"updates": 100, "checkpoint_every": 20}}
    assert recipes.averaging_problem("captioning", cap) is None
    assert "from before the last 50% of the 700 updates" in recipes.averaging_problem("captioning", {**cap, "average_last": 12})


def test_a_scale_whose_average_reaches_into_the_warm_up_is_refused_naming_its_keys(mini):
    cfg = copy.deepcopy(mini)
    cfg["translation"].update(average_last=10, keep_checkpoints=10)
    with pytest.raises(ConfigError) as err:
        experiments.make_plan(cfg)
    assert ("(recipe default): translation: average_last 10 at checkpoint_every 50 averages updates 150-600, from within the warm-up "
            "of 200 updates; the averaged checkpoints must all lie after the warm-up and in the last 50% of training: lower "
            "average_last or checkpoint_every, or shorten warmup") in str(err.value)
    cfg["translation"]["refine"] = [refinement("late", {"size": "base"}, {"max_updates": 3000})]  # a refinement may mend it
    cfg["tables"] = ["rskip-t2"]
    experiments.make_plan(cfg)
    cfg["scale"] = experiments.REHEARSAL  # whose numbers mean nothing: not checked
    cfg["translation"]["refine"] = []
    experiments.make_plan(cfg)


@pytest.mark.parametrize("path", [*(f"{CONFIG}/{s}.yaml" for s in ("mini", "gpu-day", "paper")),
                                  *(pytest.param(f"config/{s}.yaml", marks=pytest.mark.config) for s in ("mini", "gpu-day", "paper"))])
def test_every_scale_averages_checkpoints_after_the_warm_up_in_the_last_half(path):
    """Every translation and captioning run of each scale whose numbers are read, every refinement
    applied: its averaged checkpoints stand for the trained model."""
    from snakemake.utils import validate

    with open(path) as f:
        config = yaml.safe_load(f)
    validate(config, "workflow/schemas/config.schema.yaml")
    plan = experiments.make_plan(config)
    sequence_runs = [run for run in plan.runs.values() if run.task in ("translation", "captioning")]
    assert sequence_runs
    assert [run.path for run in sequence_runs if recipes.averaging_problem(run.task, json.loads(run.recipe_json))] == []

"""Paper 002's simplified nets: shapes and depths, the ID entries, both initialisations against
hand-computed variances and the paper's Table 4 ratio, the exact plain <-> residual mapping, and
equivalent training (a plain net from the mapped init with its decay centred on the ID entries
follows the residual net)."""

import math

import pytest
import torch
from torch.nn import functional as F

from resrepro import models
from resrepro.models.simple_net import SimpleNet, blocks_per_group, diagonal_mask, equivalent, hmwi_, id_entries, kwi_
from resrepro.residual import ConfigError
from resrepro.speed import speed_of
from resrepro.train.classification import decay_groups, decay_targets


def net(variant="add", depth=20, init="paper", arch="simple_net", classes=10, in_channels=3, seed=0):
    torch.manual_seed(seed)
    return models.build({"arch": arch, "depth": depth, "variant": variant, "init": init, "classes": classes, "in_channels": in_channels})


def test_depth_is_3n_plus_2_with_n_blocks_a_group_and_the_papers_widths():
    assert [blocks_per_group(d) for d in (20, 32, 44, 8)] == [6, 10, 14, 2]
    for bad in (21, 3):
        with pytest.raises(ConfigError, match="3n\\+2"):
            blocks_per_group(bad)
    model = net(depth=20)
    convs = model.convs()
    assert len(convs) == 19 and len(model.blocks) == 18  # 19 convs + the classifier: 20 layers
    assert [c.out_channels for c in convs[1:]] == [16] * 6 + [32] * 6 + [64] * 6
    assert [c.stride[0] for c in convs[1:]] == [1] * 6 + [2] + [1] * 5 + [2] + [1] * 5
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert models.build({"arch": "simple_net", "depth": 8, "variant": "add", "classes": 10}).stem.in_channels == 3  # RGB unless the data says
    assert model.fc.in_features == 64 and not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())


def test_id_entries_are_the_centre_of_each_output_channels_own_input_channel():
    ids = id_entries(torch.zeros(4, 2, 3, 3))  # a rectangular kernel: both halves get them
    assert ids.sum() == 4
    assert [tuple(i) for i in ids.nonzero().tolist()] == [(0, 0, 1, 1), (1, 1, 1, 1), (2, 0, 1, 1), (3, 1, 1, 1)]
    assert id_entries(torch.zeros(2, 2, 5, 5)).nonzero().tolist() == [[0, 0, 2, 2], [1, 1, 2, 2]]  # the centre of any odd kernel
    mask = diagonal_mask(4, 2, 3)
    assert mask.sum() == 4 * 9 and mask[2, 0].sum() == 9 and mask[2, 1].sum() == 0


def test_a_residual_block_is_its_plain_conv_with_1_added_at_the_id_entries():
    """By hand: a residual block whose conv is zero passes ReLU(x) on; with its strided,
    channel-doubling skip, output channel o at (i, j) is x[o mod c, 2i, 2j]."""
    model = net("add", depth=8)
    block = model.blocks[2]  # group 2's first block: 16 -> 32 channels, stride 2
    with torch.no_grad():
        block.conv.weight.zero_()
    x = torch.rand(1, 16, 8, 8)
    out = block(x)
    assert out.shape == (1, 32, 4, 4)
    assert torch.equal(out[0, 5], x[0, 5, ::2, ::2]) and torch.equal(out[0, 21], x[0, 5, ::2, ::2])
    with torch.no_grad():
        block.conv.bias.fill_(0.5)
    assert torch.equal(block(x)[0, 21], x[0, 5, ::2, ::2] + 0.5)  # the conv's bias is part of the branch


def test_kwi_and_hmwi_variances_by_hand():
    """KWI: var 2 / (9 c_in); HMWI: std 1 / (9 c_out). Over a big layer the sample std is within 2%."""
    model = SimpleNet(20, 10, "plain")
    kwi_(model)
    conv = model.blocks[7].conv  # 32 -> 32: 9,216 weights
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / (9 * 32)), rel=0.02)
    assert conv.bias.abs().sum() == 0
    hmwi_(model)
    assert conv.weight.std().item() == pytest.approx(1 / (9 * 32), rel=0.02)
    assert model.blocks[12].conv.weight.std().item() == pytest.approx(1 / (9 * 64), rel=0.02)  # 32 -> 64: c_out


def test_the_weight_decay_term_of_a_plain_net_is_about_268_times_a_residual_nets_at_depth_20():
    """SM Table 4: 0.0005393 (plain, depth 20) against 268 times less (residual); the plain term
    grows with depth as 0.0005393 : 0.0008878 : 0.001238. Sum of squared weights (biases are 0)."""
    def mass(model):
        return sum((p**2).sum().item() for name, p in model.named_parameters() if name.endswith("weight"))

    ratios = [mass(net("plain", seed=s)) / mass(net("add", seed=s)) for s in range(3)]
    assert 240 < sum(ratios) / 3 < 290
    plain = [mass(net("plain", depth=d)) for d in (20, 32, 44)]
    assert plain[1] / plain[0] == pytest.approx(0.0008878 / 0.0005393, rel=0.03)
    assert plain[2] / plain[0] == pytest.approx(0.001238 / 0.0005393, rel=0.03)


def test_init_is_kwi_for_plain_and_hmwi_for_residual_nets():
    plain, residual = net("plain"), net("add")
    assert plain.blocks[0].conv.weight.std() > 10 * residual.blocks[0].conv.weight.std()


@pytest.mark.parametrize("arch", ["simple_net", "simple_net_diagonal"])
def test_the_mapping_is_exact_both_ways_in_float64(arch):
    residual_net = net("add", depth=14, arch=arch).double()
    with torch.no_grad():  # trained-looking weights, not the init's tiny ones
        for p in residual_net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    plain_net = equivalent(residual_net, "plain")
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    assert plain_net.variant == "plain" and residual_net.variant == "add"
    assert torch.allclose(plain_net(x), residual_net(x), rtol=0, atol=1e-12)
    back = equivalent(plain_net, "add")
    assert torch.allclose(back(x), residual_net(x), rtol=0, atol=1e-12)
    assert torch.allclose(back.blocks[3].conv.weight, residual_net.blocks[3].conv.weight, rtol=0, atol=1e-15)
    same = equivalent(residual_net, "add")  # already that form: an independent copy
    assert same is not residual_net and torch.equal(same(x), residual_net(x))
    with torch.no_grad():
        same.fc.bias.add_(1.0)
    assert not torch.equal(same(x), residual_net(x))
    for r, p in zip(residual_net.blocks, plain_net.blocks):  # only the blocks' ID entries move, by exactly 1
        assert torch.allclose(p.conv.weight - r.conv.weight, id_entries(r.conv.weight), rtol=0, atol=1e-15)
    assert torch.equal(plain_net.stem.weight, residual_net.stem.weight) and torch.equal(plain_net.fc.weight, residual_net.fc.weight)


def test_diagonal_nets_keep_only_the_diagonal_kernels_and_stay_zero_off_it():
    model = net("add", depth=8, arch="simple_net_diagonal")
    block = model.blocks[2]
    off = block.conv.weight * (1 - block.mask)
    assert off.abs().sum() == 0 and block.conv.weight.abs().sum() > 0
    assert model.stem.weight.ne(0).all()  # the stem and the classifier are full
    model(torch.randn(4, 3, 8, 8)).square().sum().backward()
    grad = block.conv.weight.grad
    assert (grad * (1 - block.mask)).abs().sum() == 0 and (grad * block.mask).abs().sum() > 0  # training stays on the diagonal


def test_an_equivalent_plain_net_starts_as_the_residual_run_of_its_seed_and_decays_towards_its_id_entries():
    residual_net, plain_net = net("add", depth=8, seed=3), net("plain", depth=8, seed=3, init="equivalent")
    x = torch.randn(2, 3, 8, 8)
    assert torch.allclose(plain_net(x), residual_net(x), atol=1e-6)
    assert plain_net.blocks[0].conv.weight[5, 5, 1, 1].item() == pytest.approx(1 + residual_net.blocks[0].conv.weight[5, 5, 1, 1].item())
    centred = decay_targets(plain_net)
    assert len(centred) == len(plain_net.blocks) and decay_targets(residual_net) == {}
    assert torch.equal(centred[plain_net.blocks[4].conv.weight], id_entries(plain_net.blocks[4].conv.weight))
    groups = decay_groups(plain_net, centred)
    assert len(groups) == 2 and groups[1]["weight_decay"] == 0.0
    assert len(groups[0]["params"]) + len(groups[1]["params"]) == len(list(plain_net.parameters()))
    with pytest.raises(ConfigError, match="must be `plain`"):
        net("add", init="equivalent")
    with pytest.raises(ConfigError, match="allowed: paper, equivalent"):
        net("plain", init="orthogonal")


def test_equivalent_training_follows_the_residual_net_up_to_rounding():
    """SM B: the same mini-batches, SGD with momentum and weight decay (the plain net's centred on
    its ID entries, as the training loop does it). After 20 steps in float64 both nets compute the
    same function up to rounding (the gap grows from 1e-16 by the ratcheting the paper describes,
    and is far larger in float32), while a plain net whose decay is centred on 0 drifts away."""
    torch.manual_seed(0)
    batches = [(torch.randn(16, 1, 8, 8), torch.randint(0, 10, (16,))) for _ in range(20)]
    x = torch.randn(8, 1, 8, 8)

    def train(model, centred, dtype):
        model = model.to(dtype)
        centred = decay_targets(model) if centred else {}
        opt = torch.optim.SGD(decay_groups(model, centred), lr=0.1, momentum=0.9, weight_decay=0.01)
        for inputs, y in batches:
            opt.zero_grad()
            F.cross_entropy(model(inputs.to(dtype)), y).backward()
            for weight, centre in centred.items():
                weight.grad.add_(weight.detach() - centre, alpha=0.01)
            opt.step()
        return model(x.to(dtype))

    def built(dtype, variant, init="paper"):
        with speed_of({"dtype": "float64" if dtype == torch.float64 else "float32"}, torch.device("cpu")).building():
            return net(variant, depth=8, in_channels=1, seed=1, init=init)

    def gap(dtype):
        residual_out = train(built(dtype, "add"), False, dtype)
        return (train(built(dtype, "plain", "equivalent"), True, dtype) - residual_out).abs().max().item(), residual_out

    (gap64, residual_out), (gap32, _) = gap(torch.float64), gap(torch.float32)
    uncentred = equivalent(built(torch.float64, "add"), "plain")
    uncentred.decays_to_identity = False  # the same start, its decay centred on 0
    drift = (train(uncentred, True, torch.float64) - residual_out).abs().max().item()
    assert gap64 < 1e-14 and drift > 1e-3
    assert gap32 > 1e6 * gap64  # float32's rounding: the paper used float64 for this
    assert torch.get_default_dtype() == torch.float32  # building() restores it


def test_float64_runs_cast_weights_and_inputs_and_refuse_bf16():
    speed = speed_of({"dtype": "float64"}, torch.device("cpu"), image_model=True)
    assert speed.dtype == torch.float64 and not speed.amp
    model = speed.place(net("add", depth=8), torch.device("cpu"))
    assert model.stem.weight.dtype == torch.float64 and speed.layout(torch.zeros(1, 3, 8, 8)).dtype == torch.float64
    assert not speed_of({"dtype": "float64"}, torch.device("cuda")).amp  # amp auto: no autocast in double precision
    with pytest.raises(ValueError, match="without autocast"):
        speed_of({"dtype": "float64", "amp": "bf16"}, torch.device("cpu"))
    with pytest.raises(ValueError, match="float32 or float64"):
        speed_of({"dtype": "float16"}, torch.device("cpu"))


def test_the_training_loop_trains_an_equivalent_plain_net_as_its_residual_run_in_float64(tmp_path):
    """SM B through train(): the same seed's residual run and equivalently initialised plain run,
    float64, give the same losses and errors to rounding; the checkpoint rebuilds the plain net
    with its decay still centred on the ID entries."""
    from resrepro.data.digits import prepare_digits
    from resrepro.train.classification import train

    prepare_digits(tmp_path / "digits.pt")
    base = {"task": "classification", "dataset": "digits", "arch": "simple_net8", "model": "simple_net", "depth": 8, "args": {},
            "seed": 0, "epochs": 2, "batch_size": 128, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3, "lr_milestones": [1],
            "warmup_lr": 0.01, "warmup_iterations": 0, "warmup_min_depth": 110, "augment_pad": 1, "augment_flip": False,
            "dtype": "float64"}
    residual_run = train({**base, "variant": "add"}, tmp_path / "digits.pt", tmp_path / "add", device="cpu", progress=False)
    plain_run = train({**base, "variant": "plain", "init": "equivalent"}, tmp_path / "digits.pt", tmp_path / "plain", device="cpu", progress=False)
    for key in ("train_loss", "test_loss", "train_error", "test_error"):
        assert plain_run["final"][key] == pytest.approx(residual_run["final"][key], rel=1e-9, abs=1e-12)
    assert residual_run["final"]["train_loss"] < 2.30  # it learned something: not a pair of untrained nets
    rebuilt = models.from_checkpoint(models.load_checkpoint(tmp_path / "plain" / "checkpoints" / "last.pt"))
    assert rebuilt.stem.weight.dtype == torch.float64 and len(decay_targets(rebuilt)) == len(rebuilt.blocks)


def test_a_float64_run_is_measured_in_float64(tmp_path):
    """Table 2's runs rebuild in float64; the measurements feed float32 images, cast on the way in."""
    import pandas as pd

    from resrepro import files
    from resrepro.data.digits import prepare_digits
    from resrepro.measure.run import run_measurement

    with speed_of({"dtype": "float64"}, torch.device("cpu")).building():
        model = net("plain", depth=8, in_channels=1, init="equivalent")
    files.save_torch(tmp_path / "run" / "checkpoints" / "last.pt", {"model": model.state_dict(), "model_spec": {
        "arch": "simple_net", "depth": 8, "variant": "plain", "init": "equivalent", "classes": 10, "in_channels": 1}})
    prepare_digits(tmp_path / "digits.pt")
    settings = {"examples": 20, "splits": ["test"], "batch_size": 10}
    run_measurement("l2_ratio", tmp_path / "run", tmp_path / "digits.pt", settings, tmp_path / "l2.csv", device="cpu")
    frame = pd.read_csv(tmp_path / "l2.csv")
    assert len(frame) == len(model.blocks) and frame["value"].notna().all()


def test_the_fully_fledged_resnet_blocks_are_he_et_als_and_plain_drops_only_the_skip():
    """resnet_cifar (paper 002's fully fledged ResNet-20): 3 stages of (depth - 2) / 6 post-activation
    blocks; the plain block is the residual one without its skip; the widening skip is option A
    (strided identity, new channels zero); 0.27M parameters at depth 20 (He et al. 2016a, Table 6)."""
    from torch.nn import functional as F

    from resrepro.models.resnet_cifar import PostActBlock

    spec = {"arch": "resnet_cifar", "depth": 20, "classes": 10, "in_channels": 3}
    plain, residual = (models.build({**spec, "variant": v}) for v in ("plain", "add"))
    assert len(residual.blocks) == 9 and sum(p.numel() for p in residual.parameters()) == pytest.approx(0.27e6, rel=0.02)
    assert sum(p.numel() for p in plain.parameters()) == sum(p.numel() for p in residual.parameters())
    block = PostActBlock(16, 32, 2, "add", {}).eval()
    x = torch.randn(2, 16, 8, 8)
    branch = block.bn2(block.conv2(F.relu(block.bn1(block.conv1(x)))))
    skip = torch.cat([x[:, :, ::2, ::2], torch.zeros(2, 16, 4, 4)], dim=1)
    assert torch.allclose(block(x), F.relu(branch + skip))
    block.residual = PostActBlock(16, 32, 2, "plain", {}).residual
    assert torch.allclose(block(x), F.relu(branch))
    with pytest.raises(Exception, match="6n\\+2"):
        models.build({**spec, "depth": 21, "variant": "add"})


@pytest.mark.config
@pytest.mark.parametrize("scale", ["paper", "gpu-day", "rehearsal", "mini"])
@pytest.mark.parametrize("depth, paper_term", [(20, 0.0005393), (32, 0.0008878), (44, 0.001238)])
def test_the_recipes_decay_term_of_a_plain_net_at_initialisation_is_the_papers(scale, depth, paper_term):
    """SM Table 4 prints the plain nets' weight-decay terms before training (0.0005393 at depth 20,
    "4281 times" less than the loss). The `noise` recipe's coefficient must give them, measured as
    the report measures the term (measure.weights.decay_term), at the paper's widths, within 10%."""
    import yaml

    from resrepro import recipes
    from resrepro.measure.weights import decay_term

    config = yaml.safe_load(open(f"config/{scale}.yaml"))["classification"]
    _, recipe = recipes.resolve(config, {"paper": "noise", "table": "noise-t1", "kind": "table", "arch": "simple_net",
                                         "variant": "plain", "dataset": "cifar10", "depth": depth})
    terms = [decay_term(net("plain", depth=depth, seed=s), recipe["weight_decay"]) for s in range(3)]
    assert sum(terms) / 3 == pytest.approx(paper_term, rel=0.10)

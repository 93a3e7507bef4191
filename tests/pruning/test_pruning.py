"""Behaviour of the pruning methods on tiny models: selection, shrinking, freezing, telemetry, resume."""

from __future__ import annotations

import contextlib
import io
import math

import pytest
import torch
from common import TINY_ARCHS, HostSyncError, NoHostSync
from torch import nn

import iss.archs
import iss.pruning as pruning
from iss.pruning.base import gap_threshold, n_unimportant, select_nm, select_smallest
from iss.pruning.schedule import growth_schedule
from iss.pruning.telemetry import TelemetryRecorder, pack_bits, popcount, unpack_bits

RATIO = 0.75


def tiny_model(seed: int = 0) -> nn.Sequential:
    """Two convs and a linear: three layers of different sizes (216, 576 and 640 weights)."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, 5),
    )  # fmt: skip


def twin_model(seed: int = 0) -> nn.Sequential:
    """Four layers, two of them of equal size, so they share one stacked group."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16), nn.Linear(16, 4)
    )


def batch(model: nn.Module, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if isinstance(model[0], nn.Conv2d):
        return torch.randn(2, 3, 6, 6, generator=g), torch.randn(2, 5, generator=g)
    return torch.randn(4, 6, generator=g), torch.randn(4, 4, generator=g)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, pruner: pruning.Pruner, seed: int) -> None:
    """One step of the contract: backward, before_step, optimizer step, pruner step."""
    x, y = batch(model, seed)
    opt.zero_grad()
    nn.functional.l1_loss(model(x), y).backward()
    pruner.before_step()
    opt.step()
    pruner.step()


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith("weight")}


def expected_unimportant(w: torch.Tensor, ratio: float) -> torch.Tensor:
    """Reference selection: the ceil(r n) smallest |w| (stable order on ties)."""
    a = w.abs().flatten()
    k = n_unimportant(ratio, a.numel())
    out = torch.zeros(a.numel(), dtype=torch.bool)
    out[a.argsort(stable=True)[:k]] = True
    return out.view_as(w)


# ----- registry and validation -----
def test_unknown_method_lists_methods():
    with pytest.raises(KeyError, match="iss-p"):
        pruning.build("iss-q", tiny_model(), 0.5)


@pytest.mark.parametrize("ratio", [1.0, -0.1, 1.5, "0.5", True])
def test_invalid_ratio(ratio):
    with pytest.raises(ValueError, match="ratio"):
        pruning.build("iss-p", tiny_model(), ratio)


def test_unknown_option_and_bad_values():
    with pytest.raises(ValueError, match="accepted"):
        pruning.build("iss-p", tiny_model(), 0.5, alfa=0.9)
    with pytest.raises(ValueError, match="alpha"):
        pruning.build("iss-p", tiny_model(), 0.5, alpha=1.0)
    with pytest.raises(ValueError, match="prune_iters"):
        pruning.build("iht", tiny_model(), 0.5, prune_iters=-1)
    with pytest.raises(ValueError, match="no Conv2d/Linear"):
        pruning.build("l1", tiny_model(), 0.5, include=["*nothing*"])


def test_n_unimportant_is_ceil_without_float_noise():
    assert n_unimportant(0.9, 10) == 9
    assert n_unimportant(0.95, 7200) == 6840
    assert n_unimportant(0.5, 7) == 4
    assert n_unimportant(0.99, 10) == 9  # never the whole layer


# ----- selection -----
@pytest.mark.parametrize("seed", range(5))
def test_select_smallest_all_paths_agree_with_reference(seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 40, (5, 300), generator=g).float()  # many ties
    k = 217
    ref = torch.zeros_like(a, dtype=torch.bool)
    ref.scatter_(1, a.argsort(dim=1, stable=True)[:, :k], True)
    below, tau = select_smallest(a, k)
    assert torch.equal(below, ref)
    for hint in (tau, tau - 3, tau + 2, torch.full_like(tau, -1.0), torch.full_like(tau, 1e9)):
        assert torch.equal(select_smallest(a, k, hint)[0], ref)
    b = torch.rand(5, 300, generator=g)
    _, tau_b = select_smallest(b, k)
    ref_b = torch.zeros_like(b, dtype=torch.bool).scatter_(1, b.argsort(dim=1)[:, :k], True)
    assert torch.equal(select_smallest(b + 1e-4 * torch.randn(5, 300, generator=g), k, tau_b)[0].sum(1),
                       ref_b.sum(1))  # fmt: skip


def test_gap_threshold_sits_in_the_middle_of_the_gap():
    a = torch.tensor([[1.0, 2.0, 3.0, 10.0], [4.0, 0.0, 8.0, 6.0]])
    below = torch.tensor([[True, True, False, False], [True, True, False, False]])
    tau = torch.tensor([[2.0], [4.0]])  # the selection's threshold
    assert gap_threshold(a, below, tau).flatten().tolist() == [2.5, 5.0]


def test_the_threshold_hint_holds_when_iht_zeroes_and_the_optimizer_moves_the_weights_back():
    """IHT zeroes the selected weights and Adam moves them back by about the learning rate each step, near
    the smallest kept weights: the hint must still separate the next step's magnitudes, or the fast path
    selects every layer again at every step (EDSR-L's IHT cells trained 1.7x slower so)."""
    g = torch.Generator().manual_seed(0)
    lr = 1e-3
    layer = nn.Linear(100, 10, bias=False)
    small = torch.randperm(1000, generator=g)[:900]
    weights = 1.2 * lr + 0.01 * torch.rand(1000, generator=g)
    weights[small] = lr * torch.rand(900, generator=g)
    layer.weight.data = weights.view(10, 100)
    pruner = pruning.build("iht", layer, 0.9, prune_iters=10)
    pruner.step()  # selects the 900 small weights and zeroes them
    zeroed = layer.weight.data.flatten() == 0
    layer.weight.data.view(-1)[zeroed] = lr * torch.rand(900, generator=g)  # one Adam step moves them back
    group = pruner.groups[0]
    with torch.no_grad():
        assert int(zeroed.sum()) == 900 and torch.equal(group.magnitudes() > group.tau, group.kept)


def test_select_nm():
    a = torch.tensor([[4.0, 1.0, 3.0, 2.0, 0.5, 0.5, 9.0, 0.1]])
    assert select_nm(a, 2, 4).tolist() == [[False, True, False, True, True, False, False, True]]
    below = select_nm(a, 3, 4)
    assert below.view(-1, 4).sum(1).tolist() == [3, 3]
    assert below.tolist() == [[False, True, True, True, True, True, False, True]]


# ----- ISS-P and IHT -----
def test_iss_p_shrinks_exactly_the_unimportant_weights_by_alpha():
    model = tiny_model()
    pruner = pruning.build("iss-p", model, RATIO, alpha=0.9, prune_iters=5)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    before_build = weights(model)
    assert all(
        torch.equal(before_build[n], w) for n, w in weights(model).items()
    )  # build leaves weights alone
    x, y = batch(model, 0)
    nn.functional.l1_loss(model(x), y).backward()
    pruner.before_step()
    opt.step()
    after_opt = weights(model)
    pruner.step()
    after = weights(model)
    alpha = torch.tensor(0.9)
    for name, w in after_opt.items():
        unimportant = expected_unimportant(w, RATIO)
        assert torch.equal(after[name], torch.where(unimportant, w * alpha, w)), name
        assert torch.equal(pruner.masks[name], ~unimportant)
        assert pruner.masks[name].sum() == w.numel() - math.ceil(RATIO * w.numel())


def test_iss_p_alpha_ramp_lowers_the_shrink_factor_to_zero_by_the_freeze():
    """``alpha_ramp=3`` of ``prune_iters=6``: alpha, alpha, alpha, then 2/3, 1/3 and 0 of it; each step
    multiplies the unimportant weights by exactly that factor (the rebuilt factors, not the cached ones)."""
    model = tiny_model()
    pruner = pruning.build("iss-p", model, RATIO, alpha=0.9, prune_iters=6, alpha_ramp=3)
    factors = []
    for _ in range(6):
        before = weights(model)
        pruner.step()
        factors.append(pruner.current_alpha())
        for name, w in before.items():
            unimportant = expected_unimportant(w, RATIO)
            shrunk = torch.where(unimportant, w * torch.tensor(factors[-1]), w)
            assert torch.equal(weights(model)[name], shrunk), (len(factors), name)
    assert factors == pytest.approx([0.9, 0.9, 0.9, 0.6, 0.3, 0.0])
    assert pruner.stage == "finetune"
    with pytest.raises(ValueError, match="alpha_ramp"):
        pruning.build("iss-p", tiny_model(), RATIO, alpha_ramp=-1)


@pytest.mark.parametrize("method", ["iss-p", "iht"])
def test_masks_freeze_at_prune_iters_and_stay_zero(method):
    model = tiny_model()
    pruner = pruning.build(method, model, RATIO, prune_iters=4)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for i in range(4):
        assert pruner.stage == "prune" and pruner.iteration == i
        train_step(model, opt, pruner, i)
        for name, mask in pruner.masks.items():
            assert int(mask.sum()) == mask.numel() - math.ceil(RATIO * mask.numel()), name
    assert pruner.stage == "finetune" and pruner.iteration == 4
    frozen = {n: m.clone() for n, m in pruner.masks.items()}
    params = dict(model.named_parameters())
    for name, mask in frozen.items():
        assert torch.all(params[name][~mask] == 0)
    for i in range(4, 9):
        train_step(model, opt, pruner, i)
        assert pruner.stage == "finetune"
        for name, mask in frozen.items():
            assert torch.equal(pruner.masks[name], mask)
            assert torch.all(params[name][~mask] == 0)
            assert torch.all(params[name][mask] != 0)
        assert pruner.stats.flips_permille_total == 0.0


def test_iht_zeroes_unimportant_during_pruning():
    model = tiny_model()
    pruner = pruning.build("iht", model, RATIO, prune_iters=10)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    train_step(model, opt, pruner, 0)
    for name, p in model.named_parameters():
        if name in pruner.masks:
            assert int((p == 0).sum()) == math.ceil(RATIO * p.numel())
            assert torch.all(p[~pruner.masks[name]] == 0)


def test_prune_iters_zero_freezes_at_build():
    model = tiny_model()
    pruner = pruning.build("iss-p", model, RATIO, prune_iters=0)
    assert pruner.stage == "finetune"
    for name, p in model.named_parameters():
        if name in pruner.masks:
            assert torch.all(p[~pruner.masks[name]] == 0)


def test_parameter_identity_biases_untouched():
    model = tiny_model()
    ids = [id(p) for p in model.parameters()]
    biases = {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith("bias")}
    pruner = pruning.build("iht", model, RATIO, prune_iters=1)
    train_step(model, torch.optim.SGD(model.parameters(), 0.0), pruner, 0)
    assert [id(p) for p in model.parameters()] == ids
    assert all(torch.equal(biases[n], p) for n, p in model.named_parameters() if n.endswith("bias"))
    assert set(pruner.masks) == {"0.weight", "2.weight", "6.weight"}


def test_include_exclude_globs():
    assert set(pruning.build("l1", tiny_model(), 0.5, exclude=["6*"]).masks) == {"0.weight", "2.weight"}
    assert set(pruning.build("l1", tiny_model(), 0.5, include=["2"]).masks) == {"2.weight"}
    assert set(pruning.build("l1", tiny_model(), 0.5, include="2").masks) == {"2.weight"}  # one glob
    assert set(pruning.build("l1", tiny_model(), 0.5, include=["*.weight"], exclude=["0.*"]).masks) == {
        "2.weight", "6.weight",
    }  # fmt: skip


# ----- L1 -----
def test_l1_masks_init_magnitudes_from_iteration_zero():
    model = tiny_model()
    init = weights(model)
    pruner = pruning.build("l1", model, RATIO)
    assert pruner.stage == "finetune" and pruner.prune_iters == 0
    params = dict(model.named_parameters())
    for name, w in init.items():
        unimportant = expected_unimportant(w, RATIO)
        assert torch.equal(pruner.masks[name], ~unimportant)
        assert torch.equal(params[name].detach(), torch.where(unimportant, 0.0, w))
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for i in range(3):
        train_step(model, opt, pruner, i)
    for name in init:
        assert torch.all(params[name][~pruner.masks[name]] == 0)


# ----- N:M -----
def test_nm_mode_prunes_n_of_every_m():
    model = twin_model()
    pruner = pruning.build("iss-p", model, 0.75, nm="3:4", prune_iters=2)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for i in range(2):
        train_step(model, opt, pruner, i)
        for mask in pruner.masks.values():
            assert mask.flatten().view(-1, 4).sum(1).eq(1).all()
    with pytest.raises(ValueError, match="agree"):
        pruning.build("iss-p", twin_model(), 0.5, nm="3:4")
    with pytest.raises(ValueError, match="multiple of M"):
        pruning.build("iss-p", twin_model(), 0.8, nm="4:5")
    with pytest.raises(ValueError, match="N:M"):
        pruning.build("iss-p", twin_model(), 0.8, nm="4-5")


# ----- telemetry -----
def test_flip_counting_and_distances_on_a_hand_made_case():
    layer = nn.Linear(4, 2, bias=False)  # 8 weights, ratio 0.5 -> 4 unimportant
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]))
    model = nn.Sequential(layer)
    pruner = pruning.build("iss-p", model, 0.5, alpha=0.5, prune_iters=100, window=2)
    seen = []
    pruner.add_callback(seen.append)
    assert pruner.masks["0.weight"].flatten().tolist() == [False] * 4 + [True] * 4

    def set_and_step(values):
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(values).view(2, 4))
        pruner.step()
        return seen[-1]

    s = set_and_step([10.0, 2, 3, 4, 5, 6, 7, 8])  # 10 becomes important, 5 unimportant: 2 flips
    assert s.flips == {"0.weight": 2} and s.flips_permille == {"0.weight": 250.0}
    assert s.flips_permille_total == 250.0 and s.distance_first_permille == 250.0
    assert s.distance_window_permille == 250.0 and s.kept == {"0.weight": 0.5}
    s = set_and_step([1.0, 2, 3, 4, 5, 6, 7, 8])  # back to the first selection
    assert s.flips["0.weight"] == 2 and s.distance_first_permille == 0.0
    assert s.distance_window_permille == 0.0  # mask two iterations earlier = first selection
    s = set_and_step([1.0, 20, 30, 4, 5, 6, 7, 8])  # 2 and 3 important, 6 and 7 not: 4 flips
    assert s.flips["0.weight"] == 4 and s.distance_first_permille == 500.0
    assert s.distance_window_permille == 500.0  # vs the mask after iteration 1: kept {0,5,6,7} vs {1,2,6,7}
    s = set_and_step([1.0, 20, 30, 4, 5, 6, 7, 8])
    assert s.flips["0.weight"] == 0 and s.distance_window_permille == 500.0  # vs iteration 2 (= first)
    s = set_and_step([10.0, 2, 3, 4, 5, 6, 7, 8])  # the mask of iteration 1 again
    assert s.flips["0.weight"] == 4 and s.distance_first_permille == 250.0
    assert s.distance_window_permille == 500.0  # vs iteration 3
    assert s.iteration == 5 and s.stage == "prune"
    assert s.grad_norm == {}  # before_step was not called


def test_gradient_statistics():
    model = tiny_model()
    pruner = pruning.build("iss-p", model, RATIO, prune_iters=3)
    x, y = batch(model, 0)
    nn.functional.l1_loss(model(x), y).backward()
    pruner.before_step()
    pruner.step()
    stats = pruner.stats
    for name, p in model.named_parameters():
        if name in pruner.masks:
            g = p.grad.double()
            assert stats.grad_norm[name] == pytest.approx(float(g.norm()), rel=1e-5)
            assert stats.grad_var[name] == pytest.approx(float(g.abs().var(unbiased=False)), rel=1e-3)
            assert stats.grad_var_signed[name] == pytest.approx(float(g.var(unbiased=False)), rel=1e-3)
    assert list(stats.flips) == ["0.weight", "2.weight", "6.weight"]


# ----- resume -----
def run(method: str, steps: range, model, opt, pruner) -> None:
    for i in steps:
        train_step(model, opt, pruner, i)


def roundtrip(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


RESUME_CASES = [
    ("iss-p", {"prune_iters": 6}),
    ("iss-p", {"prune_iters": 6, "alpha_ramp": 4}),  # saved mid-ramp
    ("iht", {"prune_iters": 6}),
    ("iss-r", {"prune_iters": 6, "eta_interval": 2}),
    ("srp", {"prune_iters": 7, "eta_interval": 2, "stabilize_iters": 2}),
    ("assl", {"prune_iters": 10, "eta_interval": 2, "ssa_iters": 6, "stabilize_iters": 2}),  # resumed in SSA
    ("l1", {}),
    ("scratch", {"seed": 3}),
]


@pytest.mark.parametrize(("save_sync_free", "load_sync_free"), [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize(("method", "options"), RESUME_CASES)
def test_state_dict_resume_is_bit_exact(method, options, save_sync_free, load_sync_free):
    model_a = twin_model()
    pruner_a = pruning.build(method, model_a, RATIO, window=3, sync_free=save_sync_free, **options)
    opt_a = torch.optim.Adam(model_a.parameters(), 1e-2)
    stats_a = []
    pruner_a.add_callback(stats_a.append)
    run(method, range(4), model_a, opt_a, pruner_a)
    saved = roundtrip(
        {"model": model_a.state_dict(), "opt": opt_a.state_dict(), "pruner": pruner_a.state_dict()}
    )
    run(method, range(4, 10), model_a, opt_a, pruner_a)

    model_b = twin_model(seed=1)  # resume order: build model and pruner, then load the saved states
    pruner_b = pruning.build(method, model_b, RATIO, window=3, sync_free=load_sync_free, **options)
    model_b.load_state_dict(saved["model"])
    opt_b = torch.optim.Adam(model_b.parameters(), 1e-2)
    opt_b.load_state_dict(saved["opt"])
    pruner_b.load_state_dict(saved["pruner"])
    stats_b = []
    pruner_b.add_callback(stats_b.append)
    run(method, range(4, 10), model_b, opt_b, pruner_b)
    for (name, a), b in zip(model_a.state_dict().items(), model_b.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert all(torch.equal(pruner_a.masks[n], pruner_b.masks[n]) for n in pruner_a.masks)
    assert (pruner_a.iteration, pruner_a.stage) == (pruner_b.iteration, pruner_b.stage)
    assert stats_a[4:] == stats_b


def test_load_state_dict_rejects_other_method():
    state = pruning.build("iss-p", tiny_model(), RATIO, prune_iters=3).state_dict()
    with pytest.raises(ValueError, match="iss-p"):
        pruning.build("iht", tiny_model(), RATIO, prune_iters=3).load_state_dict(state)


def test_list_methods():
    assert pruning.list_methods() == ["scratch", "l1", "iht", "iss-r", "iss-p", "srp", "assl"]
    assert pruning.options("iss-p")["alpha"] == 0.95


@pytest.mark.parametrize("method", ["scratch", "l1", "iht", "iss-r", "iss-p", "srp", "assl"])
def test_every_method_ends_exactly_sparse_and_stays_so(method):
    model = tiny_model()
    options = {} if method in ("l1", "scratch") else {"prune_iters": 6}
    pruner = pruning.build(method, model, RATIO, **options)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    run(method, range(9), model, opt, pruner)
    assert pruner.stage == "finetune"
    params = dict(model.named_parameters())
    for name, mask in pruner.masks.items():
        assert int((~mask).sum()) == math.ceil(RATIO * mask.numel())
        assert torch.all(params[name][~mask] == 0)


# ----- schedules -----
def test_official_and_scaled_growth_schedules():
    official = growth_schedule()
    assert (official.prune_iters, official.delta, official.eta_interval, official.eta_max) == (
        100_000,
        1e-4,
        20,
        0.5,
    )
    assert sum(official.grows_at(i) for i in range(200_000)) == 5000
    srp = growth_schedule(official_stabilize=43_150)
    assert srp.prune_iters == 143_150
    assl = growth_schedule(official_stabilize=43_150, official_ssa=17_260)
    assert (assl.ssa_iters, assl.prune_iters) == (17_260, 160_410)
    scaled = growth_schedule(2000, official_stabilize=43_150)
    assert (scaled.stabilize_iters, scaled.growth_iters, scaled.prune_iters) == (603, 1397, 2000)
    updates = sum(scaled.grows_at(i) for i in range(2000))
    assert updates == 70 and updates * scaled.delta == pytest.approx(0.5)
    assert growth_schedule(2000, delta=1e-3).delta == 1e-3
    with pytest.raises(ValueError, match="raise prune_iters"):
        growth_schedule(10, stabilize_iters=10)


# ----- ISS-R, SRP, ASSL -----
def grads_after_backward(model: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    x, y = batch(model, seed)
    model.zero_grad()
    nn.functional.l1_loss(model(x), y).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_iss_r_eta_growth_cap_and_l2_gradient():
    model = tiny_model()
    pruner = pruning.build("iss-r", model, RATIO, prune_iters=10, delta=0.1, eta_interval=3, eta_max=0.25)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    params = dict(model.named_parameters())
    previous = {n: torch.zeros_like(e) for n, e in pruner.eta.items()}
    for i in range(10):
        assert pruner.stage == "prune"
        grads = grads_after_backward(model, i)
        masks_before = {n: m.clone() for n, m in pruner.masks.items()}
        pruner.before_step()
        for name, eta in pruner.eta.items():
            w = params[name].detach()
            assert torch.equal(params[name].grad, torch.addcmul(grads[name], eta, w))
            if i % 3 == 0:  # re-picked and grown on the current unimportant set
                assert int((~pruner.masks[name]).sum()) == math.ceil(RATIO * w.numel())
                grown = torch.clamp(previous[name] + 0.1, max=0.25)
                assert torch.equal(eta, torch.where(pruner.masks[name], previous[name], grown))
            else:
                assert torch.equal(eta, previous[name])
                assert torch.equal(pruner.masks[name], masks_before[name])
            assert torch.all(eta >= previous[name]) and float(eta.max()) <= 0.25
            previous[name] = eta.clone()
        opt.step()
        pruner.step()
    assert pruner.stage == "finetune"
    assert max(float(e.max()) for e in pruner.eta.values()) == pytest.approx(0.25)
    for name, mask in pruner.masks.items():
        assert torch.all(params[name][~mask] == 0)
    grads = grads_after_backward(model, 99)
    pruner.before_step()  # no regularisation after the freeze
    assert all(torch.equal(params[n].grad, grads[n]) for n in pruner.masks)


def test_official_iss_r_stage_length():
    pruner = pruning.build("iss-r", tiny_model(), RATIO)
    assert pruner.prune_iters == 100_000 and pruner.schedule.delta == 1e-4


def test_srp_set_is_fixed_then_stabilised_then_pruned():
    model = tiny_model()
    init = weights(model)
    pruner = pruning.build("srp", model, RATIO, prune_iters=9, eta_interval=2, stabilize_iters=4, delta=0.1)
    assert pruner.schedule.growth_iters == 5
    first = {n: m.clone() for n, m in pruner.masks.items()}
    for name, w in init.items():
        assert torch.equal(first[name], ~expected_unimportant(w, RATIO))
    opt = torch.optim.Adam(model.parameters(), 0.05)
    etas = []
    for i in range(9):
        train_step(model, opt, pruner, i)
        etas.append({n: e.clone() for n, e in pruner.eta.items()})
        if i < 8:
            assert all(torch.equal(pruner.masks[n], first[n]) for n in first)
    assert [float(e["0.weight"].max()) for e in etas] == pytest.approx([0.1, 0.1, 0.2, 0.2, 0.3] + [0.3] * 4)
    assert all(torch.equal(e["0.weight"] > 0, ~first["0.weight"]) for e in etas)
    assert pruner.stage == "finetune"
    params = dict(model.named_parameters())
    for name, mask in first.items():
        assert torch.equal(pruner.masks[name], mask)
        assert torch.all(params[name][~mask] == 0)


def alignment_reference(pruner, model: nn.Module) -> dict[str, torch.Tensor]:
    """Autograd gradient of lw_spr * mean over pairs of mean_i (s_a - s_b)^2 for the two 16x16 layers."""
    names = ["2.weight", "4.weight"]
    group = next(g for g in pruner.groups if g.names == names)
    params = dict(model.named_parameters())
    ws = [params[n].detach().clone().requires_grad_(True) for n in names]
    tau = group.tau.detach()
    soft = [
        torch.sigmoid((w.abs().flatten() - t) / (pruner.temperature * t))
        for w, t in zip(ws, tau, strict=True)
    ]
    loss = pruner.lw_spr * (soft[0] - soft[1]).pow(2).mean()
    loss.backward()
    return {n: w.grad for n, w in zip(names, ws, strict=True)}


def test_assl_alignment_gradient_then_growing_l2():
    model = twin_model()
    pruner = pruning.build(
        "assl",
        model,
        0.5,
        prune_iters=8,
        ssa_iters=3,
        stabilize_iters=2,
        eta_interval=2,
        delta=0.1,
        lw_spr=0.5,
    )
    assert [len(g) for g in pruner._aligned] == [0, 1, 0]  # only the two 16x16 layers align
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    params = dict(model.named_parameters())
    for i in range(3):  # SSA phase
        grads = grads_after_backward(model, i)
        pruner.before_step()
        reference = alignment_reference(pruner, model)
        for name, ref in reference.items():
            torch.testing.assert_close(params[name].grad - grads[name], ref, rtol=1e-4, atol=1e-9)
        assert all(float(e.max()) == 0 for e in pruner.eta.values())  # all layers constrained: no reg yet
        opt.step()
        pruner.step()
    assert pruner.alignment_loss() >= 0
    grads = grads_after_backward(model, 3)
    pruner.before_step()  # iteration 3: re-pick, eta starts growing on the new set
    for name, eta in pruner.eta.items():
        assert torch.equal(eta > 0, ~pruner.masks[name]) and float(eta.max()) == pytest.approx(0.1)
        assert torch.equal(params[name].grad, torch.addcmul(grads[name], eta, params[name].detach()))
    opt.step()
    pruner.step()
    run("assl", range(4, 8), model, opt, pruner)
    assert pruner.stage == "finetune"


def test_assl_unconstrained_layers_grow_during_ssa():
    model = twin_model()
    pruner = pruning.build("assl", model, 0.5, prune_iters=8, ssa_iters=3, stabilize_iters=2, eta_interval=2,
                           delta=0.1, constrain=["2.*", "4.*"])  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    first = {n: m.clone() for n, m in pruner.masks.items()}
    run("assl", range(3), model, opt, pruner)
    eta = pruner.eta
    assert float(eta["2.weight"].max()) == 0 and float(eta["4.weight"].max()) == 0
    assert float(eta["0.weight"].max()) == pytest.approx(0.2)
    assert torch.equal(pruner.masks["0.weight"], first["0.weight"])  # unconstrained: fixed until SSA ends


# ----- Scratch -----
def test_scratch_random_mask_and_fresh_init():
    model = tiny_model()
    init = weights(model)
    state = torch.random.get_rng_state()
    pruner = pruning.build("scratch", model, RATIO, seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is left alone
    assert pruner.stage == "finetune"
    l1_masks = pruning.build("l1", tiny_model(), RATIO).masks
    params = dict(model.named_parameters())
    for name, mask in pruner.masks.items():
        assert int((~mask).sum()) == math.ceil(RATIO * mask.numel())
        assert not torch.equal(mask, l1_masks[name])
        assert torch.all(params[name][~mask] == 0)
        assert not torch.equal(params[name][mask], init[name][mask])  # re-initialised
    model_again = tiny_model(seed=1)
    again = pruning.build("scratch", model_again, RATIO, seed=5)
    other = pruning.build("scratch", tiny_model(), RATIO, seed=6)
    assert all(torch.equal(again.masks[n], m) for n, m in pruner.masks.items())
    assert not all(torch.equal(other.masks[n], m) for n, m in pruner.masks.items())
    assert all(torch.equal(a, b) for a, b in zip(model_again.parameters(), model.parameters(), strict=True))


# ----- a tiny SwinIR -----
@pytest.fixture(scope="module")
def tiny_swinir():
    archs = pytest.importorskip("iss.archs")
    return lambda: archs.build("swinir-light", 2, embed_dim=12, depths=(2,), num_heads=(2,))


@pytest.mark.parametrize("method", ["iss-p", "iht"])
def test_swinir_every_step_selection_is_exact(tiny_swinir, method):
    torch.manual_seed(0)
    model = tiny_swinir()
    pruner = pruning.build(method, model, 0.9, prune_iters=6)
    alpha = 0.95 if method == "iss-p" else 0.0
    names = pruner.layer_names
    assert "layers.0.residual_group.blocks.0.attn.qkv.weight" in names and "conv_first.weight" in names
    assert all(n.endswith(".weight") for n in names)
    linears_convs = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert len(names) == len(linears_convs)
    opt = torch.optim.Adam(model.parameters(), 2e-3)
    params = dict(model.named_parameters())
    lr, hr = torch.rand(2, 3, 8, 8), torch.rand(2, 3, 16, 16)
    for _ in range(8):
        opt.zero_grad()
        nn.functional.l1_loss(model(lr), hr).backward()
        pruner.before_step()
        opt.step()
        stage = pruner.stage
        snapshot = {n: params[n].detach().clone() for n in names}
        pruner.step()
        for name in names:
            if stage == "prune":  # the selection of this step, from the weights after the optimizer step
                unimportant = expected_unimportant(snapshot[name], 0.9)
                assert torch.equal(pruner.masks[name], ~unimportant), name
                factor = alpha if pruner.stage == "prune" else 0.0  # the freezing step zeroes them
                shrunk = torch.where(unimportant, snapshot[name] * torch.tensor(factor), snapshot[name])
                assert torch.equal(params[name].detach(), shrunk), name
            assert int((~pruner.masks[name]).sum()) == math.ceil(0.9 * snapshot[name].numel())
    assert pruner.stage == "finetune"
    assert all(torch.all(params[n][~pruner.masks[n]] == 0) for n in names)


# ----- sync-free mode -----
MODE_CASES = [  # every method with both stages inside 20 iterations
    ("iss-p", {"prune_iters": 12}),
    ("iht", {"prune_iters": 12}),
    ("iss-r", {"prune_iters": 12, "eta_interval": 3}),
    ("srp", {"prune_iters": 12, "eta_interval": 3, "stabilize_iters": 3}),
    ("assl", {"prune_iters": 12, "eta_interval": 3, "ssa_iters": 5, "stabilize_iters": 3}),
    ("l1", {}),
    ("scratch", {"seed": 3}),
]
MODE_CASES += [(method, {**options, "nm": "3:4"}) for method, options in MODE_CASES]


def tiny_edsr(seed: int = 0) -> nn.Module:
    """EDSR-L from tests/common.py (5.7 K weights, several layers of one shape)."""
    torch.manual_seed(seed)
    return iss.archs.build("edsr-l", 2, **TINY_ARCHS["edsr-l"])


def sr_step(model, opt, pruner, seed: int, guard=contextlib.nullcontext) -> torch.Tensor:
    """One training step on random data, the pruner's calls inside ``guard()`` (e.g. ``NoHostSync``)."""
    g = torch.Generator().manual_seed(seed)
    weight = next(model.parameters())  # the data follows the model's device and dtype
    lr, hr = (torch.rand(2, 3, n, n, generator=g).to(weight.device, weight.dtype) for n in (8, 16))
    opt.zero_grad()
    loss = nn.functional.l1_loss(model(lr), hr)
    loss.backward()
    with guard():
        pruner.before_step()
    opt.step()  # Adam reads its step count on the host: outside the guard
    with guard():
        pruner.step()
    return loss.detach()


@contextlib.contextmanager
def cuda_sync_errors():
    """CUDA's own detector: any synchronising CUDA call raises inside."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def assert_same_state(a, b) -> None:
    """Equal nested state dicts (tensors compared exactly)."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same_state(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same_state(x, y)
    else:
        assert a == b


def test_pack_bits_popcount_and_unpack():
    g = torch.Generator().manual_seed(0)
    for numel in (1, 7, 8, 61, 640):
        mask = torch.rand(numel, generator=g) > 0.5
        packed = pack_bits(mask)
        assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(numel / 8)
        assert torch.equal(unpack_bits(packed, numel), mask)
        other = torch.rand(numel, generator=g) > 0.5
        assert int(popcount(packed ^ pack_bits(other))) == int((mask ^ other).sum())
    assert pack_bits(torch.tensor([True, False, True] + [False] * 4 + [True])).tolist() == [0b10000101]
    assert int(popcount(torch.arange(256, dtype=torch.uint8))) == 8 * 128


def test_the_cpu_numpy_paths_equal_the_torch_paths_other_devices_take():
    """Counting, packing and the gap threshold go through NumPy on the CPU (the selection of EDSR-L's 43 M
    weights every step: 1.4x faster training steps there); CUDA takes the torch ops. Same bits from both."""
    from iss.pruning import base, telemetry

    g = torch.Generator().manual_seed(0)
    for rows, n in ((1, 1), (3, 61), (5, 640), (2, 4099)):
        a = torch.rand(rows, n, generator=g)
        a[:, : n // 3] = a[:, :1]  # ties
        median = a.median(1, keepdim=True).values
        below = a <= median
        assert torch.equal(telemetry.count_true(below), telemetry._count_true_torch(below))
        flipped = below.clone()
        flipped[:, ::7] ^= True
        expected = (below ^ flipped).sum(1, keepdim=True)
        assert torch.equal(telemetry.count_differing(below, flipped), expected)  # counted on words
        tail = expected - (below[:, :1] ^ flipped[:, :1]).long()
        assert torch.equal(telemetry.count_differing(below[:, 1:], flipped[:, 1:]), tail)  # mid-word slices
        assert torch.equal(telemetry.count_differing(below[:, 1:], flipped[:, 1:].clone()), tail)
        assert bool(base.differing_rows(below[:, 1:], flipped[:, 1:].clone()).all()) == bool((tail > 0).all())
        assert torch.equal(telemetry.pack_bits(below), telemetry._pack_bits_torch(below.reshape(-1)))
        packed = telemetry.pack_bits(below)
        assert torch.equal(telemetry.popcount(packed), telemetry._popcount_torch(packed))
        k = int((a < a[:, :1]).sum(1).min()) + 1  # the k-th smallest is the tied value in some row
        ties_split = base.select_smallest(a, k)
        if n > 3:
            assert bool(((a <= ties_split[1]).sum(1) > k).any())  # its ties fall on both sides
        selections = [(below, median), ties_split, (below & False, a.amin(1, keepdim=True) - 1)]
        for selected, tau in [*selections, (below | True, a.amax(1, keepdim=True))]:
            gap = base.gap_threshold(a, selected, tau)
            largest, smallest = base._gap_ends_torch(a, selected)
            assert torch.equal(gap, (largest + smallest) / 2)


@pytest.mark.parametrize("shift", [-0.3, -1e-3, 0.0, 1e-3, 0.3, -1e9])
def test_the_threshold_repair_finds_the_kth_value_on_both_paths(shift, monkeypatch):
    """A hint off by a few entries (or many, or at zero) is repaired to each row's exact k-th smallest,
    by the CPU's band search and by the masked top-k the other devices take; ties included."""
    from iss.pruning import base, telemetry

    g = torch.Generator().manual_seed(1)
    for rows, n in ((1, 2), (4, 61), (6, 5000)):
        a = torch.rand(rows, n, generator=g)
        a[:, : n // 4] = a[:, :1]  # ties
        a[0, : n // 2] = 0.0  # zeros, as IHT leaves them
        k = max(1, n - n // 5)
        tau = a.kthvalue(k, 1, keepdim=True).values
        hint = (tau + shift).clamp(min=0.0)
        below = hint >= a
        miss = telemetry.count_true(below) - k
        worst = int(miss.abs().max())
        on_cpu = base._repair_threshold(a, below, miss, worst, hint)
        monkeypatch.setattr(telemetry, "CPU_NUMPY", False)
        elsewhere = base._repair_threshold(a, below, miss, worst, hint)
        monkeypatch.setattr(telemetry, "CPU_NUMPY", True)
        expected = torch.where(miss == 0, hint, tau)  # a hint that selects k already stays
        assert torch.equal(on_cpu, expected) and torch.equal(elsewhere, expected)


def test_sync_free_is_the_default_on_cuda_only():
    assert not pruning.build("iss-p", tiny_model(), RATIO, prune_iters=3).sync_free
    assert pruning.build("iss-p", tiny_model(), RATIO, prune_iters=3, sync_free=True).sync_free
    assert pruning.options("assl")["sync_free"] is None


@pytest.mark.parametrize(("method", "options"), MODE_CASES)
def test_sync_free_mode_gives_the_fast_path_results_bit_for_bit(method, options):
    runs = []
    for sync_free in (False, True):
        model = tiny_edsr()
        pruner = pruning.build(method, model, RATIO, window=4, sync_free=sync_free, **options)
        runs.append((model, torch.optim.Adam(model.parameters(), 1e-2), pruner))
    (fast_model, _, fast), (free_model, _, free) = runs
    seen, losses = [], []
    fast.add_callback(seen.append)
    recorder = TelemetryRecorder(free)
    for i in range(20):
        losses.append(float(sr_step(*runs[0], seed=i)))
        recorder.record(sr_step(*runs[1], seed=i))
        for name, mask in fast.masks.items():
            assert torch.equal(free.masks[name], mask), (i, name)
        for (name, a), b in zip(
            fast_model.state_dict().items(), free_model.state_dict().values(), strict=True
        ):
            assert torch.equal(a, b), (i, name)
    assert fast.stage == free.stage == "finetune"
    recorded = recorder.flush()
    assert [stats for stats, _ in recorded] == seen  # flips, distances, gradient statistics, per layer
    assert [loss for _, loss in recorded] == losses
    assert_same_state(fast.state_dict(), free.state_dict())
    if method in ("iss-p", "iht", "iss-r", "assl"):  # re-selecting methods: the test saw flips and drift
        assert max(s.flips_permille_total for s in seen) > 0
        assert max(s.distance_window_permille for s in seen) > 0


SYNCS = {
    "item": lambda x: x.sum().item(),
    "tolist": lambda x: x.tolist(),
    "bool": lambda x: bool(x.any()),
    "int": lambda x: int(x.sum()),
    "float": lambda x: float(x.sum()),
    "index": lambda x: range(9)[x.long().sum()],
    "nonzero": lambda x: x.nonzero(),
    "mask index": lambda x: x[x > 0.5],
    "mask assign": lambda x: x.__setitem__(x > 0.5, 0.0),
    "list index": lambda x: x[[0, 1]],
    "unique": lambda x: torch.unique(x),
    "equal": lambda x: torch.equal(x, x),
    "cpu": lambda x: x.cpu(),
    "host data": lambda x: torch.tensor([1.0, 2.0]),
}


@pytest.mark.parametrize("call", SYNCS.values(), ids=SYNCS.keys())
def test_no_host_sync_detector_catches_each_sync(call):
    x = torch.rand(4, 5)
    call(x)  # fine outside
    with NoHostSync(), pytest.raises(HostSyncError):
        call(x)


def test_no_host_sync_detector_lets_device_ops_run():
    x = torch.rand(4, 5)
    with NoHostSync():
        tau = x.kthvalue(3, dim=1, keepdim=True).values
        below = torch.where(x <= tau, 1.0, 0.5).cumsum(1).any(1, keepdim=True)
        x.index_select(0, torch.arange(2))[torch.zeros(2, dtype=torch.long)].masked_fill_(below[:2], 0.0)


@pytest.mark.parametrize(("method", "options"), MODE_CASES)
def test_sync_free_steps_never_wait_for_the_device(method, options):
    model = tiny_edsr()
    pruner = pruning.build(method, model, RATIO, window=4, sync_free=True, **options)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    recorder = TelemetryRecorder(pruner)
    for i in range(16):  # both stages
        loss = sr_step(model, opt, pruner, i, guard=NoHostSync)
        with NoHostSync():
            recorder.record(loss)
    assert pruner.stage == "finetune" and len(recorder) == 16
    assert [stats.iteration for stats, _ in recorder.flush()] == list(range(1, 17))


@pytest.mark.parametrize(("method", "options"), [("iss-p", {}), ("iss-r", {"eta_interval": 1})])
def test_fast_path_waits_for_the_device(method, options):
    model = tiny_edsr()
    pruner = pruning.build(method, model, RATIO, prune_iters=12, sync_free=False, **options)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    with pytest.raises(HostSyncError, match="nonzero"):
        sr_step(model, opt, pruner, 0, guard=NoHostSync)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(("method", "options"), [("iss-p", {}), ("assl", {"ssa_iters": 2})])
def test_sync_free_on_cuda_under_the_sync_debug_mode(method, options):
    model = tiny_edsr().cuda()
    pruner = pruning.build(method, model, RATIO, prune_iters=6, window=4, **options)
    assert pruner.sync_free
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    recorder = TelemetryRecorder(pruner)
    for i in range(8):
        loss = sr_step(model, opt, pruner, i, guard=cuda_sync_errors)
        with cuda_sync_errors():
            recorder.record(loss)
    assert len(recorder.flush()) == 8 and pruner.stage == "finetune"


def test_recorder_matches_stats_and_window_memory_is_bounded():
    model = tiny_edsr()
    pruner = pruning.build("iss-p", model, RATIO, prune_iters=30, window=3)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    recorder = TelemetryRecorder(pruner)
    stats = []
    for i in range(6):
        sr_step(model, opt, pruner, i)
        stats.append(pruner.stats)
        recorder.record()
        assert len(pruner._tracker._history) == min(i + 2, 4)  # masks of `window` iterations back and now
    flushed = recorder.flush()
    assert [s for s, _ in flushed] == stats and all(math.isnan(loss) for _, loss in flushed)
    assert recorder.flush() == [] and len(recorder) == 0
    pruner.step()  # without before_step: no gradient statistics
    recorder.record(0.5)
    ((last, loss),) = recorder.flush()
    assert last.grad_norm == {} and last.iteration == 7 and loss == 0.5 and last == pruner.stats

"""The thesis' 2-D experiment (§4.1): the flows2d paired dataset, the paired_mlp encoders, the kl_contrastive family,
the paired metrics and the artifact the dashboard panel draws (tests/dashboards/panels/test_paired_panel.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from study.intake.spec_reader import parse_spec
from trainables.data import flows2d
from trainables.data._splits import IndexedDataset
from trainables.families.kl_contrastive.loss import KL_TERM, kl_to_standard_normal
from trainables.loop import TrialRun
from trainables.metrics.contrastive import paired_metrics
from trainables.models import PairedMLP
from trainables.schema.metric_names import PAIRED_COSINE, PAIRED_MAE, on_test
from trainables.schema.record import PAIRED_EMBEDDINGS_FILE

#: A flow fit small enough for a unit test (the default fits in seconds, not milliseconds).
TINY = flows2d.FlowConfig(steps=30, batch=64, hidden=8, layers=2, samples=500)


def test_flow_fit_is_deterministic_leaves_the_rng_alone_and_round_trips_through_the_cache(tmp_path):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    fitted = flows2d._fit("moons", TINY), flows2d._fit("moons", TINY)
    for a, b in zip(fitted[0].state_dict().values(), fitted[1].state_dict().values()):
        assert torch.equal(a, b)
    torch.manual_seed(123)
    flows = flows2d.trained_flows(str(tmp_path), TINY)  # fitted, then written to the cache
    assert torch.equal(torch.get_rng_state(), before)  # the trial's random stream did not move
    assert [p.name for p in tmp_path.iterdir()] == [f"flows2d-{TINY.key()}.pt"]
    cached = flows2d.trained_flows(str(tmp_path), TINY)  # read back
    z = torch.randn(100, 2, generator=torch.Generator().manual_seed(0))
    for f, g in zip(flows, cached):
        assert torch.equal(f.sample_from(z), g.sample_from(z))
        x = f.sample_from(z)
        assert torch.allclose(f.couplings[0].inverse(f.couplings[0](x)[0]), x, atol=1e-5)  # an invertible layer
    assert TINY.key() != flows2d.FlowConfig().key()


def test_targets_are_standardised_moons_and_five_blobs():
    moons = flows2d.target_samples("moons", 2000, 0)
    blobs = flows2d.target_samples("blobs5", 2000, 0)
    for x in (moons, blobs):
        np.testing.assert_allclose(x.mean(0), 0, atol=1e-5)
        np.testing.assert_allclose(x.std(0), 1, atol=1e-5)
    from sklearn.cluster import KMeans

    km = KMeans(5, n_init=3, random_state=0).fit(blobs)
    assert km.inertia_ / len(blobs) < 0.1  # five tight discs
    with pytest.raises(ValueError, match="modality must be one of"):
        flows2d.target_samples("circles", 10, 0)


def test_paired_split_holds_both_modalities_tagged_and_octant_labels():
    flows = flows2d.trained_flows(None, TINY)
    z = np.random.default_rng(0).standard_normal((64, 2)).astype(np.float32)
    split = flows2d.paired_split(z, flows)
    assert split.paired and split.items.shape == (64, 2, 3)
    np.testing.assert_array_equal(split.subset(np.arange(64) < 10).latent, z[:10])  # a fold keeps its own z's
    assert torch.equal(split.items[:, 0, 2], torch.zeros(64)) and torch.equal(split.items[:, 1, 2], torch.ones(64))
    angle = np.degrees(np.arctan2(z[:, 1], z[:, 0])) % 360
    np.testing.assert_array_equal(split.labels, (angle // 45).astype(int))
    two = IndexedDataset(split, flows2d.FirstView(), num_views=2)[5][0]
    one = IndexedDataset(split, flows2d.FirstView())[5][0]
    assert torch.equal(two, split.items[5]) and torch.equal(one, split.items[5, 0])  # views used as they are


def test_paired_mlp_routes_each_row_to_its_modality_encoder():
    torch.manual_seed(0)
    net = PairedMLP(2, 2)
    x = torch.randn(6, 2)
    tag = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 0.0])[:, None]
    out = net(torch.cat([x, tag], 1))
    for i in range(6):
        tower = net.towers[int(tag[i])]
        torch.testing.assert_close(out[i], tower(x[i : i + 1])[0])
    assert len(list(net.towers[0].children())) == 3  # Linear → ReLU → Linear: two fully connected layers


def test_kl_term_and_paired_metrics_against_hand_values():
    raw = torch.tensor([[1.0, 0.0], [3.0, 2.0]])  # mean (2, 1), biased variance (1, 1)
    assert float(kl_to_standard_normal(raw)) == pytest.approx(0.5 * (4 + 1))
    assert float(kl_to_standard_normal(torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))) == pytest.approx(0.0)
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    y = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    m = paired_metrics(x, y)
    assert m[PAIRED_MAE] == pytest.approx((math.sqrt(2) + 1) / 2) and m[PAIRED_COSINE] == pytest.approx(0.5)


def _spec(loss: str, cache: str) -> dict:
    return {
        "name": "thesis_2d_test",
        "family": "kl_contrastive",
        "params": {"loss": loss},
        "dataset": {"name": "flows2d", "root": cache},
        "model": {"backbone": "paired_mlp", "embedding_dim": 2},
        "validation": {"kind": "none"},
        "train": {
            "epochs": 1,
            "classes_per_batch": 8,
            "samples_per_class": 4,
            "batches_per_epoch": 8,
            "recall_at": [1],
        },
    }


@pytest.fixture(scope="module")
def cache(tmp_path_factory, monkeypatch_module):
    # The default flows would take seconds to fit; the tiny ones are the module's default for these tests.
    monkeypatch_module.setattr(flows2d, "DEFAULT_FLOWS", TINY)
    return str(tmp_path_factory.mktemp("flows2d_cache"))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.parametrize("loss", ["npair", "debiased_neg", "debiased_pos", "hcl"])
def test_a_trial_trains_on_raw_outputs_and_reports_table_1_metrics(loss, cache, tmp_path):
    trial = TrialRun.single(parse_spec(_spec(loss, cache)))
    member = trial.member
    assert not member.model.normalize  # kl_contrastive declares raw_embeddings
    assert member.data.train.num_classes == flows2d.NUM_TRAIN_CLASSES  # what the driver's checks read unloaded
    inputs, _, _ = next(iter(member._train_loader()))
    assert inputs.shape == (32, 2, 3) and torch.equal(inputs[:, 1, 2], torch.ones(32))  # both modalities, batch 32
    metrics = trial.run_epoch()
    assert {f"train/loss/{loss}", f"train/loss/{KL_TERM}"} <= set(metrics)
    mae, cosine = metrics[on_test(PAIRED_MAE)], metrics[on_test(PAIRED_COSINE)]
    assert math.isfinite(mae) and math.isfinite(cosine) and -1 <= cosine <= 1
    test = member.embed(member.data.test)
    torch.testing.assert_close(test.norm(dim=1), torch.ones(len(test)))  # retrieval sees the normalised output
    trial.save(tmp_path)
    with np.load(tmp_path / "artifacts" / PAIRED_EMBEDDINGS_FILE) as arrays:
        assert arrays["view0"].shape == arrays["view1"].shape == (flows2d.N_TEST, 2)
        np.testing.assert_array_equal(arrays["latent"], member.data.test.latent)
        again = paired_metrics(torch.as_tensor(arrays["view0"]), torch.as_tensor(arrays["view1"]))
    assert again[PAIRED_MAE] == pytest.approx(mae, rel=1e-5)

"""Real-data benchmark (``python -m fastsm digits``): data loaders and the pipeline on a small subset."""

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.datasets import load_digits  # noqa: E402

from fastsm import datasets  # noqa: E402
from fastsm.cli.digits import Result, euclidean_error, format_table, run_split, verdict  # noqa: E402


@pytest.mark.parametrize("center", [2, 4])
def test_digits_reconstruction_splits_the_images_into_outer_and_central_pixels(center):
    Xtr, Xte, Ytr, Yte = datasets.digits_reconstruction(center, seed=3)
    images = load_digits().images / 8.0 - 1.0
    assert Xtr.shape[1] == 64 - center**2 and Ytr.shape[1] == center**2
    assert len(Xtr) + len(Xte) == len(images) and abs(len(Xte) - len(Xtr)) <= 1
    mask = datasets.center_mask(center)
    assert mask.sum() == center**2 and mask[3:5, 3:5].all()
    # every image is recovered exactly from one row of X and Y, and each appears once
    rebuilt = np.empty((len(images), 8, 8))
    rebuilt[:, ~mask] = np.vstack([Xtr, Xte])
    rebuilt[:, mask] = np.vstack([Ytr, Yte])
    key = {im.tobytes() for im in images}
    assert {im.tobytes() for im in rebuilt} == key
    assert Xtr.min() >= -1.0 and Xtr.max() <= 1.0


def test_digits_reconstruction_rejects_bad_arguments():
    with pytest.raises(ValueError, match="center must be 2 or 4"):
        datasets.digits_reconstruction(3)
    with pytest.raises(TypeError, match="center must be an int"):
        datasets.digits_reconstruction(2.0)
    with pytest.raises(ValueError, match="test_size"):
        datasets.digits_reconstruction(2, test_size=1.0)
    with pytest.raises(ValueError, match="test_size must leave"):
        datasets.digits_reconstruction(2, test_size=1e-4)
    with pytest.raises(ValueError, match="even number"):
        datasets.center_mask(3)
    with pytest.raises(ValueError, match="center must be <= side"):
        datasets.center_mask(10)


def test_linnerud_is_twenty_men_three_by_three():
    X, Y = datasets.linnerud()
    assert X.shape == (20, 3) and Y.shape == (20, 3) and np.isfinite(X).all() and np.isfinite(Y).all()


def test_euclidean_error_is_the_row_norm():
    rng = np.random.default_rng(0)
    Y, P = rng.normal(size=(7, 4)), rng.normal(size=(7, 4))
    np.testing.assert_allclose(euclidean_error(Y, P), np.linalg.norm(Y - P, axis=1), rtol=1e-15)


def test_pipeline_on_a_subset_selects_on_training_data_and_beats_the_training_mean():
    Xtr, Xte, Ytr, Yte = datasets.digits_reconstruction(2, seed=0)
    Xtr, Ytr, Xte, Yte = Xtr[:150], Ytr[:150], Xte[:60], Yte[:60]
    results = run_split(Xtr, Xte, Ytr, Yte, cv=3)
    assert [r.method for r in results] == ["SMTGP", "KLTGP", "IKLTGP", "GPR", "kernel ridge", "W-KNN"]
    mean = euclidean_error(Yte, np.full_like(Yte, Ytr.mean(0))).mean()
    for r in results:
        assert np.isfinite(r.error) and r.fit_seconds > 0 and r.predict_seconds > 0
        # every method learns something: below predicting the training mean of the centre pixels
        # (measured: mean predictor 1.456; methods 0.748 (SMTGP) ... 0.982 (IKLTGP))
        assert r.error < mean, (r.method, r.error, mean)
    assert "a=" in results[0].chosen and "a=" not in results[1].chosen
    text = format_table(results)
    best = min(results, key=lambda r: r.error)
    starred = [line for line in text.splitlines() if f"{best.error:7.4f}*" in line]
    assert len(starred) == 1 and starred[0].startswith(best.method)


def test_verdict_names_the_best_method_with_numbers():
    rs = [Result("SMTGP", 0.5, 0.1, 1.0, 0.1, ""), Result("KLTGP", 0.4, 0.1, 1.0, 0.1, ""),
          Result("GPR", 0.6, 0.1, 1.0, 0.1, "")]
    assert verdict("t", rs) == "t: SMTGP is NOT best: KLTGP 0.4000 vs SMTGP 0.5000 (25.0% higher)."
    rs[0] = Result("SMTGP", 0.3, 0.1, 1.0, 0.1, "")
    assert verdict("t", rs) == "t: SMTGP is best (0.3000); next KLTGP 0.4000 (25.0% higher)."

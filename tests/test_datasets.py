"""fastsm.datasets: the built-in data and the loaders of scikit-learn's data sets."""

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.datasets import load_digits  # noqa: E402

from fastsm import datasets  # noqa: E402


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

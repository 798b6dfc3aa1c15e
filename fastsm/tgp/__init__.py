"""Twin Gaussian processes: KLTGP, IKLTGP and SMTGP ([SM])."""

from fastsm.tgp.api import certainty, fit, objective, predict
from fastsm.tgp.local import LocalTGPModel, fit_local
from fastsm.tgp.loo import loo_predict
from fastsm.tgp.model import Prediction, TGPModel, TGPParams
from fastsm.tgp.params import TOY1_PARAMS, median_sq_distance, scale_gamma
from fastsm.tgp.select import select
from fastsm.tgp.selection import Selection
from fastsm.tgp.update import partial_fit, remove, with_alpha

__all__ = [
    "TGPParams", "TGPModel", "Prediction", "fit", "predict", "objective", "certainty", "loo_predict", "partial_fit",
    "remove", "select", "Selection", "with_alpha", "fit_local", "LocalTGPModel",
    "scale_gamma", "median_sq_distance", "TOY1_PARAMS",
]

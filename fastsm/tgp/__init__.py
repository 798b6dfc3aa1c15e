"""Twin Gaussian processes: KLTGP, IKLTGP and SMTGP ([SM])."""

from fastsm.tgp.api import certainty, fit, objective, predict
from fastsm.tgp.model import Prediction, TGPModel, TGPParams

__all__ = ["TGPParams", "TGPModel", "Prediction", "fit", "predict", "objective", "certainty"]

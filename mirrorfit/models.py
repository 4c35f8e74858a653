"""Keras 3's ``keras.models``: ``from keras.models import ...`` becomes ``from mirrorfit.models
import ...``.
"""

from mirrorfit._src.models.cloning import clone_model as clone_model
from mirrorfit._src.models.cloning import model_from_json as model_from_json
from mirrorfit._src.models.cloning import save_model as save_model
from mirrorfit._src.models.loading import load_model as load_model
from mirrorfit._src.models.model import Model as Model
from mirrorfit._src.models.sequential import Sequential as Sequential

__all__ = ["Model", "Sequential", "clone_model", "load_model", "model_from_json", "save_model"]

"""mirrorfit: tf.keras ``compile``/``fit``/``evaluate``/``predict`` with ``MirroredStrategy``
semantics on JAX, Flax and Optax.

Layers, top to bottom: `Model` (the facade) -> trainer (loops, callbacks, progress) ->
per-replica steps -> `MirroredStrategy` (devices, mesh, placement, collectives).
"""

from mirrorfit import activations as activations
from mirrorfit import callbacks as callbacks
from mirrorfit import constraints as constraints
from mirrorfit import export as export
from mirrorfit import initializers as initializers
from mirrorfit import layers as layers
from mirrorfit import losses as losses
from mirrorfit import metrics as metrics
from mirrorfit import mixed_precision as mixed_precision
from mirrorfit import models as models
from mirrorfit import ops as ops
from mirrorfit import optimizers as optimizers
from mirrorfit import preprocessing as preprocessing
from mirrorfit import random as random
from mirrorfit import regularizers as regularizers
from mirrorfit import saving as saving
from mirrorfit import utils as utils
from mirrorfit._src.callbacks.callback import History as History
from mirrorfit._src.distribute.distributed_input import InputContext as InputContext
from mirrorfit._src.distribute.function import function as function
from mirrorfit._src.distribute.multi_worker.strategy import (
    MultiWorkerMirroredStrategy as MultiWorkerMirroredStrategy,
)
from mirrorfit._src.distribute.replica_context import ReplicaContext as ReplicaContext
from mirrorfit._src.distribute.replica_context import compute_average_loss as compute_average_loss
from mirrorfit._src.distribute.replica_context import get_replica_context as get_replica_context
from mirrorfit._src.distribute.replica_context import (
    scale_regularization_loss as scale_regularization_loss,
)
from mirrorfit._src.distribute.strategy import MirroredStrategy as MirroredStrategy
from mirrorfit._src.distribute.strategy import get_strategy as get_strategy
from mirrorfit._src.distribute.values import Mirrored as Mirrored
from mirrorfit._src.distribute.values import PerReplica as PerReplica
from mirrorfit._src.distribute.values import ReduceOp as ReduceOp
from mirrorfit._src.distribute.values import batch_mask as batch_mask
from mirrorfit._src.distribute.zero import unsplit_optimizer_state as unsplit_optimizer_state
from mirrorfit._src.initializers.initializers import Initializer as Initializer
from mirrorfit._src.layers.graph.functional import Input as Input
from mirrorfit._src.layers.graph.symbolic import KerasTensor as KerasTensor
from mirrorfit._src.layers.layer import Layer as Layer
from mirrorfit._src.losses.loss import Loss as Loss
from mirrorfit._src.metrics.metric import Metric as Metric
from mirrorfit._src.models.loading import load_model as load_model
from mirrorfit._src.models.model import Model as Model
from mirrorfit._src.models.sequential import Sequential as Sequential
from mirrorfit._src.optimizers.base import Optimizer as Optimizer
from mirrorfit._src.optimizers.gradients import apply_gradients as apply_gradients
from mirrorfit._src.regularizers.regularizers import Regularizer as Regularizer
from mirrorfit._src.saving.custom_checkpoint import Checkpoint as Checkpoint
from mirrorfit._src.saving.custom_checkpoint import CheckpointManager as CheckpointManager
from mirrorfit._src.saving.custom_checkpoint import latest_checkpoint as latest_checkpoint
from mirrorfit._src.utils.checks import MirrorfitWarning as MirrorfitWarning
from mirrorfit._src.variables.autodiff import GradientTape as GradientTape
from mirrorfit._src.variables.autodiff import value_and_grad as value_and_grad
from mirrorfit._src.variables.variable import Variable as Variable

__version__ = "0.1.0"

__all__ = [
    "Checkpoint",
    "CheckpointManager",
    "GradientTape",
    "History",
    "Initializer",
    "Input",
    "InputContext",
    "KerasTensor",
    "Layer",
    "Loss",
    "Metric",
    "Mirrored",
    "MirroredStrategy",
    "MirrorfitWarning",
    "Model",
    "MultiWorkerMirroredStrategy",
    "Optimizer",
    "PerReplica",
    "ReduceOp",
    "Regularizer",
    "ReplicaContext",
    "Sequential",
    "Variable",
    "activations",
    "apply_gradients",
    "batch_mask",
    "callbacks",
    "compute_average_loss",
    "constraints",
    "export",
    "function",
    "get_replica_context",
    "get_strategy",
    "initializers",
    "latest_checkpoint",
    "layers",
    "load_model",
    "losses",
    "metrics",
    "mixed_precision",
    "models",
    "ops",
    "optimizers",
    "preprocessing",
    "random",
    "regularizers",
    "saving",
    "scale_regularization_loss",
    "unsplit_optimizer_state",
    "utils",
    "value_and_grad",
]

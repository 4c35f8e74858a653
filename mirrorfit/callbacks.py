"""Keras-style callbacks (public re-exports)."""

from mirrorfit._src.callbacks.callback import Callback as Callback
from mirrorfit._src.callbacks.callback import History as History
from mirrorfit._src.callbacks.checkpoint import BackupAndRestore as BackupAndRestore
from mirrorfit._src.callbacks.checkpoint import Preempted as Preempted
from mirrorfit._src.callbacks.learning_rate import LearningRateScheduler as LearningRateScheduler
from mirrorfit._src.callbacks.learning_rate import ReduceLROnPlateau as ReduceLROnPlateau
from mirrorfit._src.callbacks.loggers import CSVLogger as CSVLogger
from mirrorfit._src.callbacks.loggers import LambdaCallback as LambdaCallback
from mirrorfit._src.callbacks.loggers import TensorBoard as TensorBoard
from mirrorfit._src.callbacks.mlflow_logger import MLflowLogger as MLflowLogger
from mirrorfit._src.callbacks.model_checkpoint import ModelCheckpoint as ModelCheckpoint
from mirrorfit._src.callbacks.optuna_pruning import (
    OptunaPruningCallback as OptunaPruningCallback,
)
from mirrorfit._src.callbacks.progbar import ProgbarLogger as ProgbarLogger
from mirrorfit._src.callbacks.stopping import EarlyStopping as EarlyStopping
from mirrorfit._src.callbacks.stopping import TerminateOnNaN as TerminateOnNaN
from mirrorfit._src.callbacks.throughput import ThroughputMonitor as ThroughputMonitor
from mirrorfit._src.callbacks.wandb_logger import WandbLogger as WandbLogger
from mirrorfit._src.distribute.multi_worker.preemption import (
    PREEMPTED_EXIT_CODE as PREEMPTED_EXIT_CODE,
)

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "BackupAndRestore",
    "CSVLogger",
    "Callback",
    "EarlyStopping",
    "History",
    "LambdaCallback",
    "LearningRateScheduler",
    "MLflowLogger",
    "ModelCheckpoint",
    "OptunaPruningCallback",
    "Preempted",
    "ProgbarLogger",
    "ReduceLROnPlateau",
    "TensorBoard",
    "TerminateOnNaN",
    "ThroughputMonitor",
    "WandbLogger",
]

"""Keras-style callbacks (public re-exports)."""

from mirrorfit._src.callbacks import Callback as Callback
from mirrorfit._src.callbacks import History as History
from mirrorfit._src.progbar import ProgbarLogger as ProgbarLogger
from mirrorfit._src.checkpoint_callbacks import BackupAndRestore as BackupAndRestore
from mirrorfit._src.checkpoint_callbacks import ModelCheckpoint as ModelCheckpoint
from mirrorfit._src.logging_callbacks import CSVLogger as CSVLogger
from mirrorfit._src.stopping_callbacks import EarlyStopping as EarlyStopping
from mirrorfit._src.logging_callbacks import LambdaCallback as LambdaCallback
from mirrorfit._src.lr_callbacks import LearningRateScheduler as LearningRateScheduler
from mirrorfit._src.lr_callbacks import ReduceLROnPlateau as ReduceLROnPlateau
from mirrorfit._src.logging_callbacks import TensorBoard as TensorBoard
from mirrorfit._src.stopping_callbacks import TerminateOnNaN as TerminateOnNaN

__all__ = [
    "BackupAndRestore",
    "CSVLogger",
    "Callback",
    "EarlyStopping",
    "History",
    "LambdaCallback",
    "LearningRateScheduler",
    "ModelCheckpoint",
    "ProgbarLogger",
    "ReduceLROnPlateau",
    "TensorBoard",
    "TerminateOnNaN",
]

"""Mixed precision, as ``keras.mixed_precision``: ``set_global_policy("mixed_bfloat16")``
before creating a model, or ``mf.Model(..., dtype_policy="mixed_float16")`` for one model.
"""

from mirrorfit._src.modules.mixed_precision import Policy as Policy
from mirrorfit._src.modules.mixed_precision import global_policy as global_policy
from mirrorfit._src.modules.mixed_precision import set_global_policy as set_global_policy
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer as LossScaleOptimizer

__all__ = ["LossScaleOptimizer", "Policy", "global_policy", "set_global_policy"]

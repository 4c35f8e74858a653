"""Names for saved configs, as ``keras.saving``: ``@mf.saving.register_serializable()``.

A class of yours with ``get_config`` (a loss, metric, optimizer, layer or regularizer) that
is registered loads from a saved model without ``custom_objects``, under its registered name
``"package>Name"``.
"""

from mirrorfit._src.utils.registry import CustomObjectScope as CustomObjectScope
from mirrorfit._src.utils.registry import custom_object_scope as custom_object_scope
from mirrorfit._src.utils.registry import deserialize as deserialize_keras_object
from mirrorfit._src.utils.registry import get_registered_name as get_registered_name
from mirrorfit._src.utils.registry import get_registered_object as get_registered_object
from mirrorfit._src.utils.registry import register_serializable as register_serializable
from mirrorfit._src.utils.registry import serialize as serialize_keras_object

__all__ = [
    "CustomObjectScope",
    "custom_object_scope",
    "deserialize_keras_object",
    "get_registered_name",
    "get_registered_object",
    "register_serializable",
    "serialize_keras_object",
]

"""Griffe extension for the API reference: reads mirrorfit's docstrings as they are written.

- A Google-style ``Example:`` section is read as ``Examples:``. Griffe takes only the plural
  as a section of doctest examples; the singular would be rendered as a Markdown admonition,
  where ``>>>`` lines become nested quotes.
- A class that builds its instances in ``__new__`` (the ``mf.optimizers`` classes, which
  return Optax transformations) shows ``__new__``'s parameters as its signature. Griffe reads
  a class's signature from ``__init__`` only.
- A Flax module (``mf.layers``) shows its dataclass fields as its signature, in the order
  Flax's ``__init__`` takes them: the fields, ``name``, then the keyword-only fields, with
  their defaults (``Dense(units, activation=None, use_bias=True, ...)``).
- A public class shows the members it inherits from private bases, which have no page of
  their own: ``Model`` gets ``compile``/``fit``/``evaluate``/``predict`` from its mixins in
  ``mirrorfit._src``, ``MirroredStrategy`` its placement methods from ``DeviceMesh``. Members
  inherited from a public base (``Sequential`` from ``Model``) stay on that base's entry.
- An op of ``mirrorfit.ops`` (``sum = keras_op("sum", "jax.numpy.sum", "x, axis=None, ...")``
  in ``mirrorfit/_src/ops/``) is documented as the function it is at run time: Keras'
  signature, and the docstring `keras_op` gives it.
- A kind's ``get``, ``serialize`` and ``deserialize`` (``get = LOSSES.get``: the methods of
  its registry, ``mirrorfit/_src/utils/registry.py``'s ``Registry``) are documented as
  functions: the method's parameters, less ``self``, and the attribute's docstring.
"""

import ast
import re
from functools import cache
from pathlib import Path

import griffe

_REGISTRY_SOURCE = Path(__file__).resolve().parents[1] / "mirrorfit/_src/utils/registry.py"
_KIND_FUNCTION = re.compile(r"[A-Z][A-Z_]*\.(get|serialize|deserialize)")

_EXAMPLE_HEADING = re.compile(r"^Example:[ \t]*$", re.MULTILINE)


class MirrorfitDocstrings(griffe.Extension):
    """Adapts griffe to mirrorfit's docstring and class conventions (see the module docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE_HEADING.sub("Examples:", obj.docstring.value)

    def on_module_members(self, *, mod: griffe.Module, **kwargs) -> None:
        for name, member in list(mod.members.items()):
            if member.is_alias or not isinstance(member, griffe.Attribute):
                continue
            if isinstance(member.value, griffe.ExprCall) and str(
                    member.value.function) == "keras_op":
                mod.set_member(name, _keras_op(member, member.value))
            elif (_KIND_FUNCTION.fullmatch(str(member.value))
                  and str(member.value).endswith(f".{name}")):
                mod.set_member(name, _kind_function(member))

    def on_class_members(self, *, cls: griffe.Class, **kwargs) -> None:
        new = cls.members.get("__new__")
        if isinstance(new, griffe.Function) and "__init__" not in cls.members:
            cls.set_member("__init__", griffe.Function(
                "__init__", lineno=new.lineno, endlineno=new.endlineno,
                parameters=new.parameters, returns=None))

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.name != "mirrorfit":
            return
        # The public modules: mirrorfit and the modules its __all__ names.
        modules = [pkg, *(member for name, member in pkg.members.items()
                          if name in (pkg.exports or ()) and isinstance(member, griffe.Module))]
        public = {member.target_path for module in modules
                  for member in module.members.values() if member.is_alias}
        for cls in _classes(pkg["_src"]):
            if cls.path in public:
                _adopt_private_bases(cls, public)
                if _is_flax_module(cls) and "__init__" not in cls.members:
                    cls.set_member("__init__", griffe.Function(
                        "__init__", lineno=cls.lineno, endlineno=cls.lineno,
                        parameters=_flax_fields(cls)))


def _classes(module: griffe.Module):
    """The classes defined in ``module`` and its submodules (not the ones it imports)."""
    for member in module.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Module):
            yield from _classes(member)
        elif isinstance(member, griffe.Class):
            yield member


def _adopt_private_bases(cls: griffe.Class, public: set[str]) -> None:
    """Adds to ``cls`` the members of its private mirrorfit bases, in method resolution order."""
    mro = cls.mro()
    via_public = {inherited.path for base in mro if base.path in public
                  for inherited in base.mro()}
    for base in mro:
        if (base.path in public or base.path in via_public
                or not base.path.startswith("mirrorfit._src.")):
            continue
        for name, member in base.members.items():
            if name not in cls.members:
                cls.set_member(name, griffe.Alias(name, member, parent=cls))


def _is_flax_module(cls: griffe.Class) -> bool:
    """Whether ``cls`` subclasses ``flax.linen.Module``, directly or through mirrorfit bases."""
    return (any(getattr(base, "canonical_path", None) == "flax.linen.Module" for base in cls.bases)
            or any(_is_flax_module(base) for base in cls.resolved_bases))


def _flax_fields(cls: griffe.Class) -> griffe.Parameters:
    """The parameters of Flax's ``__init__`` for ``cls``: its annotated fields (a base's first,
    a redefined field in its base's place), ``name``, then the ``kw_only=True`` fields."""
    fields: dict[str, griffe.Attribute] = {}
    for klass in [*reversed(cls.mro()), cls]:
        for name, member in klass.members.items():
            # An annotated class attribute; a ClassVar is labelled "class-attribute" only.
            if (isinstance(member, griffe.Attribute) and member.annotation is not None
                    and "instance-attribute" in member.labels
                    and "property" not in member.labels):
                fields[name] = member
    positional, keyword_only = [], []
    for name, field in fields.items():
        default, kw_only = field.value, False
        if isinstance(default, griffe.ExprCall) and str(default.function).endswith("field"):
            options = {arg.name: arg.value for arg in default.arguments
                       if isinstance(arg, griffe.ExprKeyword)}
            default, kw_only = options.get("default"), str(options.get("kw_only")) == "True"
        kind = (griffe.ParameterKind.keyword_only if kw_only
                else griffe.ParameterKind.positional_or_keyword)
        (keyword_only if kw_only else positional).append(
            griffe.Parameter(name, annotation=field.annotation, kind=kind, default=default))
    name = griffe.Parameter("name", annotation="str | None", default="None",
                            kind=griffe.ParameterKind.positional_or_keyword)
    return griffe.Parameters(*positional, name, *keyword_only)


def _keras_op(attribute: griffe.Attribute, call: griffe.ExprCall) -> griffe.Function:
    """The function ``keras_op(name, path, signature, ...)`` returns, as griffe sees it: its
    parameters parsed from ``signature``, its docstring as `keras_op` writes it."""
    name, path, signature = (ast.literal_eval(str(arg)) for arg in call.arguments[:3])
    function = griffe.Function(attribute.name, lineno=attribute.lineno,
                               endlineno=attribute.endlineno, parameters=_parameters(
                                   ast.parse(f"def f({signature}): pass").body[0].args))
    function.docstring = griffe.Docstring(
        f"Keras' ``ops.{name}({signature})``, computed by ``{path}``.", parent=function)
    return function


@cache
def _registry_methods() -> dict[str, ast.FunctionDef]:
    """The methods of ``Registry``, read from its source."""
    tree = ast.parse(_REGISTRY_SOURCE.read_text())
    registry = next(node for node in tree.body
                    if isinstance(node, ast.ClassDef) and node.name == "Registry")
    return {node.name: node for node in registry.body if isinstance(node, ast.FunctionDef)}


def _kind_function(attribute: griffe.Attribute) -> griffe.Function:
    """``get = LOSSES.get`` as the function it is at run time (see the module docstring)."""
    method = _registry_methods()[attribute.name].args
    args = ast.arguments(posonlyargs=method.posonlyargs, args=method.args[1:],  # less self
                         vararg=method.vararg, kwonlyargs=method.kwonlyargs,
                         kw_defaults=method.kw_defaults, kwarg=method.kwarg,
                         defaults=method.defaults)
    function = griffe.Function(attribute.name, lineno=attribute.lineno,
                               endlineno=attribute.endlineno, parameters=_parameters(args))
    if attribute.docstring is not None:
        function.docstring = griffe.Docstring(attribute.docstring.value, parent=function)
    return function


def _parameters(args: ast.arguments) -> griffe.Parameters:
    """griffe's parameters for a function's ``ast.arguments``."""
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [griffe.Parameter(a.arg, kind=griffe.ParameterKind.positional_or_keyword,
                               default=None if d is None else ast.unparse(d))
              for a, d in zip(positional, defaults)]
    if args.vararg:
        params.append(griffe.Parameter(args.vararg.arg,
                                       kind=griffe.ParameterKind.var_positional))
    params += [griffe.Parameter(a.arg, kind=griffe.ParameterKind.keyword_only,
                                default=None if d is None else ast.unparse(d))
               for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        params.append(griffe.Parameter(args.kwarg.arg, kind=griffe.ParameterKind.var_keyword))
    return griffe.Parameters(*params)

"""The ONNX Runtime methods of `InferenceSession` (mixed in): model inputs and outputs as `NodeArg`s, the
model's metadata, providers and their options, the fallback switch, OrtValue runs, IOBinding and profiling."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._errors import InvalidInputError, InvalidOptionError
from ._ort_api import ModelMetadata, NodeArg, check_no_fallback, node_arg

if TYPE_CHECKING:  # IOBinding and OrtValue load with their first use: most sessions never make one
    from ._iobinding import IOBinding
    from ._ortvalue import OrtValue

NO_MODEL_VERSION = 2**63 - 1  # what onnxruntime reports for a model without model_version


class OrtSessionApi:
    """Mixed into InferenceSession; reads the attributes its constructor sets."""

    model: Any
    options: Any
    providers: list[Any]
    placement: Any
    _declared_inputs: dict[str, Any]
    _constants: set[str]
    _declared_outputs: dict[str, Any]
    _profiler: Any
    _arguments: tuple[Any, Any, dict[str, Any]]
    _fallback_enabled: bool = True

    # -- the model ------------------------------------------------------------------------------
    def _declared_arg(self, name: str, shape: Any) -> NodeArg:
        overrides = self.options.free_dimension_overrides
        if shape is not None:  # ONNX Runtime shows an overridden dimension as its value
            shape = [overrides.get(d, d) if isinstance(d, str) else d for d in shape]
        return node_arg(name, self.model.graph.values[name].dtype, shape)

    def get_inputs(self) -> list[NodeArg]:
        """The inputs a run feeds (initializers excluded), as declared by the model (dimension overrides applied)."""
        return [self._declared_arg(n, s) for n, s in self._declared_inputs.items()]

    def get_outputs(self) -> list[NodeArg]:
        return [self._declared_arg(n, s) for n, s in self._declared_outputs.items()]

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Initializers that are graph inputs too (a feed may replace them); none before IR version 4, where
        every initializer was listed as an input (as ONNX Runtime; decided at load: `ort_graph.settle_inputs`)."""
        import ort_graph

        graph = self.model.graph
        return [node_arg(n, graph.initializers[n].dtype, list(graph.initializers[n].dims))
                for n in ort_graph.overridable_initializers(graph)]

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata; `version` is its model_version, or onnxruntime's value for a model without
        one (2**63 - 1: an explicit 0 stays 0)."""
        m = self.model
        version = NO_MODEL_VERSION if m.model_version is None else m.model_version
        return ModelMetadata(producer_name=m.producer_name, graph_name=m.graph.name, domain=m.domain,
                             description=m.doc_string, graph_description=m.graph.doc_string, version=version,
                             custom_metadata_map=dict(m.metadata))

    # -- options and providers --------------------------------------------------------------------
    def get_session_options(self) -> Any:
        return self.options

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        """Per provider, the options it was given (strings, as ONNX Runtime reports them) and its device id."""
        out = {}
        for p in self.providers:
            given = dict(self.options.provider_options.get(p.name, {}))
            if hasattr(p, "device_id") and p.device_type == "gpu":
                given.setdefault("device_id", str(p.device_id))
            out[p.name] = given
        return out

    def disable_fallback(self) -> None:
        """Refuse the CPU fallback: raises `FallbackDisabledError` (an ONNX Runtime `EPFail`) naming the nodes
        this session already moved to the CPU. To refuse it at initialization, create the session with
        `sess_options.add_session_config_entry('session.disable_cpu_ep_fallback', '1')`."""
        check_no_fallback(self.placement, self.providers, self.model.graph)
        self._fallback_enabled = False

    def enable_fallback(self) -> None:
        """Allow the CPU fallback again (the default) for sessions `set_providers()` creates; placement is
        fixed at initialization, so the current one is unchanged."""
        self._fallback_enabled = True

    def set_providers(self, providers: Sequence[Any] | None = None,
                      provider_options: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Re-create the session with other providers (ONNX Runtime's), from the same model and options. The
        new session is built first: if it fails, this one is left as it was. After `disable_fallback()`,
        the new session refuses the CPU fallback at initialization (`session.disable_cpu_ep_fallback`)."""
        import attrs

        import ort_graph

        from ._options import DISABLE_CPU_EP_FALLBACK, SessionOptions

        model, options, kwargs = self._arguments
        if isinstance(model, ort_graph.Model):
            raise InvalidOptionError("set_providers() cannot re-create a session built from an ort_graph Model (its "
                                     "initialization rewrote the model); create a new InferenceSession from the file "
                                     "or bytes")
        kwargs = dict(kwargs)
        options = kwargs.pop("sess_options", options)
        if not self._fallback_enabled:
            options = attrs.evolve(options if isinstance(options, SessionOptions) else SessionOptions.from_mapping(options))
            options.add_session_config_entry(DISABLE_CPU_EP_FALLBACK, "1")
        fresh = type(self)(model, options, providers, provider_options, **kwargs)
        self.close()  # type: ignore[attr-defined]
        self.__dict__.update(fresh.__dict__)

    # -- runs ---------------------------------------------------------------------------------------
    def run_with_ort_values(self, output_names: Sequence[str] | None, input_dict_ort_values: Mapping[str, Any],
                            run_options: Any = None) -> list[OrtValue]:
        """`run` with OrtValues in and out (values are host-resident: see `_ortvalue`)."""
        from ._ortvalue import OrtValue

        feeds = {n: v.numpy() if isinstance(v, OrtValue) else v for n, v in dict(input_dict_ort_values).items()}
        return [OrtValue(v) for v in self.run(output_names, feeds, run_options)]  # type: ignore[attr-defined]

    run_with_ortvalues = run_with_ort_values

    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
                  callback: Callable[[list[Any], Any, str], None], user_data: Any = None,
                  run_options: Any = None) -> None:
        """ONNX Runtime's `run_async`: start `run` on a thread of its own and return at once; when it ends,
        `callback(outputs, user_data, err)` is called on that thread with the outputs and err '' on success, or
        [] and the error's message. Feed names are checked before it returns (InvalidInputError, a ValueError
        as onnxruntime raises). A run that cannot start because another is in flight on pre-allocated buffers
        reports SessionBusyError's message through the callback, as any other run error."""
        import threading

        from ._feeds import check_feed_names

        check_feed_names(self.model.graph, input_feed, self._constants)
        if not callable(callback):
            raise InvalidInputError(f"run_async: callback must be callable, got {type(callback).__name__}")
        feeds = dict(input_feed)
        names = list(output_names) if output_names else None

        def work() -> None:
            try:
                outputs = self.run(names, feeds, run_options)  # type: ignore[attr-defined]
            except Exception as e:  # noqa: BLE001 - every run error goes to the callback, as in onnxruntime
                callback([], user_data, f"{type(e).__name__}: {e}")
                return
            callback(outputs, user_data, "")

        threading.Thread(target=work, name="ort_session.run_async", daemon=True).start()

    def ortvalue_on_device(self, arr: Any, device_type: str | None = None) -> Any:
        """A copy of `arr` in this session's device memory (its only device with its own memory, or
        `device_type`), counted against the device's budget while it lives: for `IOBinding`."""
        if device_type is None:
            devices = sorted(self.memory.allocators)
            if len(devices) != 1:
                raise InvalidInputError(f"ortvalue_on_device: this session has devices {devices!r}; name one with "
                                        "device_type=")
            device_type = devices[0]
        from ._ortvalue import OrtValue

        return OrtValue.ortvalue_from_numpy(arr, device_type, 0, session=self)

    def io_binding(self) -> IOBinding:
        from ._iobinding import IOBinding

        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: Any = None) -> None:
        iobinding.run(run_options)

    # -- profiling ----------------------------------------------------------------------------------
    def end_profiling(self) -> str:
        """Write the profile (a Chrome/Perfetto trace) and stop profiling; the file name ('' when
        `SessionOptions.enable_profiling` was not set)."""
        return self._profiler.end()

    def get_profiling_start_time_ns(self) -> int:
        return self._profiler.start_time_ns


__all__ = ["OrtSessionApi"]

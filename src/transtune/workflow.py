"""The workflow object: one model, library, target, runner and cost model, carried together
through transfer-tuning, tuning, compilation, export and benchmarking (as Optuna's
``Study`` carries a study's storage and sampler)::

    with transtune.Workflow("resnext50_32x4d", library="sqlite:///lib.db", target="host",
                            cost_model="data/costmodel/attention-by-model.json") as wf:
        wf.transfer()                # every kernel gets a schedule: donors, else sampled
        wf.tune(time_budget=300)     # continue with the (guided) search
        wf.export("model.so")        # a shared library for the TVM runtime alone
        print(wf.benchmark().timings)

The kernels are extracted once; every step reads and writes the same library under the
target's hardware id.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .frontend import ImportedModel, load
from .library import Library, open_library
from .targets import TargetConfig, get_config


class Workflow:
    """``model``: a zoo name, an ``.onnx`` path or an :class:`ImportedModel` (from
    :func:`transtune.from_module`); ``library``: a URL or path, or an open :class:`Library`;
    ``target``: a configuration name (alias or hardware id) or a :class:`TargetConfig`;
    ``layout``: the data layout convolutions are lowered in, with a named target (``NCHW``
    default, or ``NHWC``), ``prepack``: whether weights are repacked for each schedule, and
    ``fast_math``: whether transcendentals are approximated (:mod:`transtune.fastmath`),
    ``winograd``: whether 3x3 convolutions are computed as Winograd's (:mod:`transtune.winograd`);
    ``runner``: a MetaSchedule runner (default: local); ``cost_model``: a checkpoint path or a
    :class:`~transtune.costmodel.metaschedule.LearnedCostModel` (default: MetaSchedule's
    XGBoost model for tuning, no ranking for transfer); ``device``: the hardware descriptor
    of what measures (default: this host's configuration, described when first needed)."""

    def __init__(
        self,
        model: str | os.PathLike | ImportedModel,
        library: str | os.PathLike | Library = "sqlite:///lib.db",
        target: str | TargetConfig = "host",
        runner: Any = None,
        cost_model: str | os.PathLike | Any = None,
        shapes: dict[str, list[int]] | None = None,
        device: Any = None,
        layout: str | None = None,
        prepack: bool = False,
        fast_math: bool = False,
        winograd: bool = False,
    ) -> None:
        if not isinstance(target, TargetConfig):
            target = get_config(target, layout, prepack, fast_math, winograd)
        self.config = target
        self.model = model if isinstance(model, ImportedModel) else load(str(model), shapes=shapes)
        self._owns_library = not isinstance(library, Library)
        self.library = open_library(library) if self._owns_library else library
        self.runner = runner
        self._cost_model = cost_model
        self.device = device
        self._kernels = None
        self._guide = None

    @property
    def kernels(self) -> list:
        """The model's tuning kernels on the target (extracted once)."""
        if self._kernels is None:
            from .tasks import extract_kernels

            self._kernels = extract_kernels(self.model.mod, self.config)
        return self._kernels

    @property
    def cost_model(self):
        """The pre-trained cost model for this target's hardware, or None."""
        if self._guide is None and self._cost_model is not None:
            if isinstance(self._cost_model, str | os.PathLike):
                from .costmodel.metaschedule import LearnedCostModel
                from .hardware import describe

                classes = {k.workload_hash: k.kernel_class for k in self.kernels}
                self.device = self.device or describe(self.config)
                self._guide = LearnedCostModel(str(self._cost_model), self.device.vector(),
                                               classes)  # fmt: skip
            else:
                self._guide = self._cost_model
        return self._guide

    def transfer(self, **options):
        """Transfer-tune from the library (options: see :func:`transtune.transfer.transfer_tune`);
        returns its :class:`~transtune.transfer.TransferResult`."""
        from .transfer import transfer_tune

        options.setdefault("cost_model", self.cost_model)
        return transfer_tune(self.model, self.library, self.config, runner=self.runner,
                             kernels=self.kernels, **options)  # fmt: skip

    def tune(self, trials: int | None = None, time_budget: float | None = None,
             kernels: list | None = None, **options):  # fmt: skip
        """Tune into the library ``kernels`` (default: all of :attr:`kernels`; options: see
        :func:`transtune.tuning.tune_kernels`); with a cost model, the search is guided by it.
        Returns a :class:`~transtune.tuning.TuneResult`."""
        from .tuning import GUIDED_SEARCH, tune_kernels

        if self.cost_model is not None:
            options.setdefault("cost_model", self.cost_model)
            options.setdefault("search", GUIDED_SEARCH)
        kernels = self.kernels if kernels is None else kernels
        return tune_kernels(kernels, self.library, self.config, self.model.name,
                            trials=trials, time_budget=time_budget, runner=self.runner,
                            **options)  # fmt: skip

    def compile(self):
        """The model built with the library's schedules for this target (a
        :class:`~transtune.compile.CompiledModel`; kernels without one are listed)."""
        from .compile import compile_model

        return compile_model(self.model, self.config, self.database())

    def export(self, path: str | os.PathLike) -> Path:
        """Compile and write a shared library (and its ``.json``) the TVM runtime loads."""
        return self.compile().export(path)

    def benchmark(self, repeat: int = 5, **options):
        """TVM with the library's schedules, PyTorch and ONNX Runtime, side by side (a
        :class:`~transtune.benchmark.BenchResult`)."""
        from .benchmark import benchmark

        return benchmark(self.model, self.config, self.database(), repeat=repeat, **options)

    def database(self, read: tuple[str, ...] | None = None):
        """The library as a MetaSchedule database bound to this target's hardware id."""
        from .library.database import LibraryDatabase

        return LibraryDatabase(self.library, self.config, read=read)

    def close(self) -> None:
        if self._owns_library:
            self.library.close()

    def __enter__(self) -> Workflow:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

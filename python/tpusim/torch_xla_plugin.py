"""PyTorch/XLA on tpusim: `PJRT_DEVICE=TPUSIM python train.py` runs an unchanged PyTorch/XLA
script on a simulated TPU (docs/pytorch.md).

torch_xla loads every class registered under the `torch_xla.plugins` entry point group (the
package registers `tpusim = tpusim.torch_xla_plugin:TpusimPlugin`) when it is imported, and
PJRT_DEVICE=TPUSIM selects this one. It hands torch_xla the PJRT plugin library
(libtpusim_pjrt.so, as JAX gets it) with the client options of the TPUSIM_* variables, and
registers the program converter: torch_xla compiles HloModuleProtos (PJRT program format
"hlo"), which the converter turns into HLO text with jaxlib's XLA bindings (jax must be
installed). tpusim.pjrt.last_report() then gives the last step's report, as from JAX.
"""
import os

import torch_xla.experimental.plugins as plugins

from jax_plugins import tpusim as _pjrt


def _xla_available():
    """Whether an XLA device can be taken: True once the tpusim plugin is loaded."""
    return True


def _supply_xla_available():
    """`xm.xla_available()`, which seed 000's snippet (and tutorials of its time) call first,
    is gone from torch_xla 2.9 (an AttributeError on every platform); with PJRT_DEVICE=TPUSIM
    the plugin supplies it where torch_xla lacks it, so such scripts run unchanged."""
    try:
        import torch_xla.core.xla_model as xm
    except Exception:  # noqa: BLE001 - torch_xla still importing: supplied at library_path()
        return
    if not hasattr(xm, "xla_available"):
        xm.xla_available = _xla_available


class TpusimPlugin(plugins.DevicePlugin):
    """The simulated TPU as a torch_xla device plugin (`PJRT_DEVICE=TPUSIM`)."""

    def library_path(self):
        _supply_xla_available()
        _pjrt.register_converter()
        return _pjrt.library_path()

    def client_create_options(self):
        return _pjrt.client_options()

    def physical_chip_count(self):
        return 1  # one process drives every simulated chip

    def configure_single_process(self):
        pass


if os.environ.get("PJRT_DEVICE", "").upper() == "TPUSIM":
    _supply_xla_available()

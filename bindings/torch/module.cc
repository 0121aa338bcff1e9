/*
 * braid_torch._C: the pybind11 module behind the Python package
 * braid_torch, whose import registers the backend "braid" with
 * torch.distributed (bindings/torch/braid_torch/__init__.py).
 */
#include "process_group.h"

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace {

/* The backend's creator, as torch.distributed calls it for every group
 * (the default one and each new_group) with the group's prefixed store. */
c10::intrusive_ptr<braid_torch::ProcessGroupBraid>
create(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
       std::chrono::milliseconds timeout) {
  return c10::make_intrusive<braid_torch::ProcessGroupBraid>(store, rank, size,
                                                             timeout);
}

} // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "braid's torch.distributed backend (docs/TORCH.md)";
  /* c10d's Python types (ProcessGroup, Store) come from torch. */
  py::module_::import("torch.distributed");

  py::class_<braid_torch::ProcessGroupBraid, c10d::ProcessGroup,
             c10::intrusive_ptr<braid_torch::ProcessGroupBraid>>(
      m, "ProcessGroupBraid",
      "A torch.distributed process group over a braid communicator.")
      .def(py::init(&create), py::arg("store"), py::arg("rank"),
           py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>(),
           "Rendezvous through `store` (rank 0 publishes braid's unique id "
           "there) and make the group's communicator; `timeout` (a "
           "timedelta) bounds every wait.")
      .def_property_readonly("timeout_ms",
                             &braid_torch::ProcessGroupBraid::timeoutMs,
                             "The communicator's timeout in milliseconds.");

  m.def("create", &create, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "The creator registered with torch.distributed.Backend.");
  m.def(
      "braid_version",
      [] {
        int v = 0;
        braid_get_version(&v);
        return v;
      },
      "braid's version code (major * 10000 + minor * 100 + patch).");
}

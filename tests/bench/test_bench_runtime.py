"""A benchmark's device and precision: bad values are refused by name, bf16 really runs in bf16, and MFU has a
peak only where one is known."""

import pytest
import torch

from posformer.bench.runtime import Runtime


@pytest.mark.parametrize(
    "device, precision, message",
    [
        ("cpu", "fp16", "precision='fp16' is invalid: expected one of auto, fp32, bf16"),
        ("tpu:x", "fp32", "device='tpu:x' is invalid"),
        ("meta", "fp32", "device='meta' is invalid: expected 'cpu', 'cuda' or 'cuda:N'"),
    ],
)
def test_bad_device_or_precision_is_named(device: str, precision: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Runtime.of(device, precision)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message where there is no CUDA")
def test_cuda_without_a_gpu_is_refused() -> None:
    with pytest.raises(ValueError, match="sees no CUDA device here"):
        Runtime.of("cuda")


def test_bf16_autocasts_the_matrix_products_and_fp32_does_not() -> None:
    a = torch.randn(4, 4)
    for precision, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        runtime = Runtime.of("cpu", precision)
        with runtime.autocast():
            assert (a @ a).dtype == dtype
        runtime.synchronize()
        assert runtime.peak_tflops() is None and runtime.name() == "cpu"

"""torch.save / torch.load of tpu tensors and state dicts, map_location."""
import io

import torch
import torch.nn as nn

import torchtpu  # noqa: F401


def roundtrip(obj, **kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **kw)


def test_tensors_keep_device_dtype_values_and_views():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4).to("tpu")
    objs = {"f": base, "view": base[:, 1:3], "bf16": base.to(torch.bfloat16),
            "i64": torch.arange(5, device="tpu"), "bool": base > 3}
    back = roundtrip(objs)
    for k, v in objs.items():
        assert back[k].device.type == "tpu", k
        assert back[k].dtype == v.dtype
        assert torch.equal(back[k].cpu(), v.cpu()), k
    # views still share the saved storage
    back["view"].zero_()
    assert back["f"][:, 1:3].abs().sum().item() == 0


def test_map_location_both_ways_and_state_dicts():
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    sd = cpu_model.state_dict()
    on_tpu = roundtrip(sd, map_location="tpu")
    assert all(v.device.type == "tpu" for v in on_tpu.values())
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)).to("tpu")
    model.load_state_dict(on_tpu)
    model.eval()
    cpu_model.eval()
    x = torch.randn(5, 4)
    torch.testing.assert_close(model(x.to("tpu")).cpu(), cpu_model(x))
    to_cpu = roundtrip(model.state_dict(), map_location="cpu")
    for k, v in to_cpu.items():
        assert v.device.type == "cpu"
        assert torch.equal(v, sd[k]), k

"""Standard models by name (``tasks.runner.applications``): the lowercase names of the benchmarking guide map onto
``keras.applications`` constructors by a table of the module's own attributes; an unknown name is refused with
its close matches; the version is the Keras version and 8 hex digits of the architecture's config hash."""

from __future__ import annotations

import pytest

from tasks.runner import applications as apps
from tasks.runner.protocol import RunnerError

#: a slice of ``dir(keras.applications)`` in Keras 3.15: constructors, submodules and private names
ATTRIBUTES = [
    "ConvNeXtTiny",
    "EfficientNetB0",
    "EfficientNetV2B0",
    "MobileNetV2",
    "MobileNetV3Large",
    "MobileNetV3Small",
    "ResNet50",
    "ResNet50V2",
    "ResNet101",
    "efficientnet",
    "imagenet_utils",
    "mobilenet_v3",
    "resnet50",
    "__name__",
]


def test_the_guides_lowercase_names_map_onto_the_constructors():
    table = apps.name_table(ATTRIBUTES)
    assert "imagenetutils" not in table and "efficientnet" not in table  # submodules are not models
    for name, constructor in {
        "resnet50": "ResNet50",
        "efficientnetb0": "EfficientNetB0",
        "mobilenet_v3_small": "MobileNetV3Small",
        "mobilenetv2": "MobileNetV2",
        "MobileNetV3Large": "MobileNetV3Large",
        "resnet50v2": "ResNet50V2",
    }.items():
        assert apps.resolve(name, table) == constructor, name


def test_the_table_keeps_only_what_the_module_says_is_a_constructor():
    assert apps.name_table(ATTRIBUTES, lambda n: n != "ResNet101") == {
        k: v for k, v in apps.name_table(ATTRIBUTES).items() if v != "ResNet101"
    }
    with pytest.raises(RunnerError, match="both MobileNetV2 and MobileNet_V2"):
        apps.name_table(["MobileNetV2", "MobileNet_V2"])


def test_an_unknown_name_is_refused_with_its_close_matches():
    table = apps.name_table(ATTRIBUTES)
    with pytest.raises(RunnerError, match=r"unknown keras.applications model 'resnet5'; close matches: resnet50"):
        apps.resolve("resnet5", table)
    with pytest.raises(RunnerError, match="close matches: .*mobilenetv3small"):
        apps.resolve("mobilenet_v3_smal", table)
    with pytest.raises(RunnerError, match="the models there are: convnexttiny, efficientnetb0"):
        apps.resolve("bert", table)


def test_the_version_is_the_keras_version_and_8_hex_of_the_config():
    digest = apps.config_sha256({"name": "resnet50", "layers": [{"class_name": "Conv2D", "config": {"filters": 64}}]})
    assert len(digest) == 64
    assert apps.version_string("3.15.1", digest) == f"keras3.15.1-{digest[:8]}"
    assert len(apps.version_string("3.16.0.dev2026120104", digest)) <= apps.MAX_VERSION_CHARS  # store column
    assert apps.version_string("3.16.0.dev2026120104", digest).endswith("-" + digest[:8])
    with pytest.raises(RunnerError, match="expected the hex sha256"):
        apps.version_string("3.15.1", "not hex")


def test_the_config_hash_is_canonical_and_sees_every_change_of_architecture():
    a = {"layers": [{"filters": 64, "kernel": (3, 3)}], "name": "m", "dtype": object}
    same = {"name": "m", "dtype": object, "layers": [{"kernel": [3, 3], "filters": 64}]}  # other key order, a list
    assert apps.config_sha256(a) == apps.config_sha256(same)
    assert apps.config_sha256(a) != apps.config_sha256({**a, "layers": [{"filters": 32, "kernel": (3, 3)}]})


def test_the_source_says_weights_are_random_and_nothing_is_downloaded():
    assert apps.describe_call("ResNet50", [96, 96, 3], 10, 0) == (
        "keras.applications.ResNet50(input_shape=(96, 96, 3), classes=10, weights=None), "
        "random weights (seed 0), nothing downloaded"
    )
    assert apps.describe_call("ResNet50", None, None, 3).startswith("keras.applications.ResNet50(weights=None)")


def test_a_constructor_without_a_static_default_gets_the_documented_shape_and_says_so():
    # MobileNetV3 builds (None, None, 3) when given no shape, which no step can be fed; Keras documents 224x224x3
    assert apps.call_shape("MobileNetV3Small", None) == [224, 224, 3]
    assert apps.call_shape("MobileNetV3Small", [32, 32, 3]) == [32, 32, 3]  # the one asked for wins
    assert apps.call_shape("ResNet50", None) is None  # fixes its documented default itself
    assert apps.describe_call("MobileNetV3Small", None, None, 0).startswith(
        "keras.applications.MobileNetV3Small(input_shape=(224, 224, 3) (Keras's documented default), weights=None)"
    )


def _layer(name: str, kernel_shape: tuple[int, ...] | None):
    from types import SimpleNamespace

    return SimpleNamespace(name=name, kernel=None if kernel_shape is None else SimpleNamespace(shape=kernel_shape))


def test_a_stem_that_reads_other_channels_than_the_input_is_refused_by_name():
    """keras-team/keras#21529: Keras 3.11's EfficientNetB0 built ``stem_conv`` with a (3, 3, 1, 32) kernel behind
    its Rescaling layer for 224x224x3 inputs, without an error. The first convolution must read the input's
    channels; a Dense-first model or unknown channels are not judged."""
    bug = [_layer("rescaling", None), _layer("normalization", None), _layer("stem_conv", (3, 3, 1, 32))]
    assert apps.first_kernel(bug) == ("stem_conv", [3, 3, 1, 32])
    why = apps.stem_mismatch([224, 224, 3], apps.first_kernel(bug))
    assert why is not None and "'stem_conv' reads 1 input channel(s) (kernel (3, 3, 1, 32))" in why
    assert "the model's input has 3" in why
    good = [_layer("rescaling", None), _layer("stem_conv", (3, 3, 3, 32))]
    assert apps.stem_mismatch([224, 224, 3], apps.first_kernel(good)) is None
    assert apps.stem_mismatch([3, 224, 224], apps.first_kernel(good), channels_last=False) is None
    assert apps.stem_mismatch([224, 224, 3], apps.first_kernel([_layer("dense", (8, 4))])) is None
    assert apps.stem_mismatch([None, None, None], apps.first_kernel(bug)) is None


def test_the_weights_digest_sees_every_value_dtype_and_shape():
    import numpy as np

    w = [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros(3, dtype=np.float32)]
    digest = apps.weights_sha256(w)
    assert digest == apps.weights_sha256([x.copy() for x in w]) and len(digest) == 64
    assert digest != apps.weights_sha256([w[0] + 1e-6, w[1]])
    assert digest != apps.weights_sha256([w[0].reshape(3, 2), w[1]])
    assert digest != apps.weights_sha256([w[0].astype(np.float64), w[1]])
    assert digest != apps.weights_sha256([w[0].T, w[1]])  # the same bytes in another order

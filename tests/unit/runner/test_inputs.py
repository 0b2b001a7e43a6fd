"""What the runner feeds a model, without TensorFlow: a string input (a SavedModel's ``tf.string``, dtype name
``string``) asks for an input_fn instead of failing on an unknown dtype (issue 26); the modules of
``PERFWATCH_RUNNER_IMPORTS`` (where custom Keras classes register) are imported, or named when they do not."""

from __future__ import annotations

import pytest

from tasks.runner import RunnerError
from tasks.runner.inputs import Declared, Signature, resolve
from tasks.runner.process import IMPORTS_ENV, import_user_modules


@pytest.mark.parametrize("dtype", ["string", "str", "object"])
def test_a_string_input_says_give_an_input_fn(dtype):
    sig = Signature((Declared("text", (None,), dtype),), "dict")  # a SavedModel signature: tf.string is "string"
    with pytest.raises(RunnerError, match=r"input 'text' is a string input .*string input: give an input_fn"):
        resolve(sig, None, 2)


def test_runner_imports_are_imported_in_order_and_a_bad_one_is_named():
    assert import_user_modules({IMPORTS_ENV: " json, tests.helpers ,"}) == ["json", "tests.helpers"]
    assert import_user_modules({}) == []
    with pytest.raises(RunnerError, match=r"PERFWATCH_RUNNER_IMPORTS: cannot import 'no_such_pkg.layers'"):
        import_user_modules({IMPORTS_ENV: "no_such_pkg.layers"})

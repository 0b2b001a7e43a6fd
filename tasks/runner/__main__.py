"""``python -m tasks.runner SPEC.json``: one measurement in this fresh interpreter (see ``process``).

The process ends with ``os._exit`` once ``result.json`` is written and the output streams are flushed:
interpreter shutdown runs TensorFlow's destructors, and a ``tf.data`` iterator whose pipeline holds a
``tf.py_function`` (a user's ``input_fn``) can wait there forever for the GIL, so the stage would sit out
its whole time limit after the measurement was done.
"""

import os
import sys

from tasks.runner.process import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)

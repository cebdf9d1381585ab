# Shared fixtures live in their own modules; pytest finds them through these imports.
import os

from hypothesis import settings

from tests.model_fixtures import tokenizer, tokenizer_dir  # noqa: F401
from tests.orm_fixtures import trained_orm  # noqa: F401
from tests.s3_server import faulty_proxy, moto_endpoint, s3_root, store_root  # noqa: F401
from tests.sft_fixtures import small_store  # noqa: F401

# The tests' own reward modules (tests.*) are an operator's allow-listed package; every stage job and
# `posttrain ui` the tests start inherits it.
os.environ["POSTTRAIN_REWARD_PACKAGES"] = "tests"

# Same examples on every run: a red CI is reproducible and a green one is not luck.
settings.register_profile("posttrain", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("posttrain")

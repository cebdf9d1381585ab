# Shared fixtures live in their own modules; pytest finds them through these imports.
from tests.model_fixtures import tokenizer, tokenizer_dir  # noqa: F401
from tests.s3_server import faulty_proxy, moto_endpoint, s3_root, store_root  # noqa: F401

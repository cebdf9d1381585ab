"""Session fixtures for the model layer: one tokenizer directory built the way the demo builds it."""

import pytest

from model.tokenizer import build_tokenizer_dir, load_tokenizer
from suites.tokenizer_corpus import suite_conversations


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    return build_tokenizer_dir(tmp_path_factory.mktemp("tokenizer"), suite_conversations())


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    return load_tokenizer(tokenizer_dir)

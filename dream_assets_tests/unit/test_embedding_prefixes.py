"""Which embedding models read an instruction before each input (``input_prefixes``), and the name their vectors of
memories are cached under (``vector_key``): e5 models get "query: " and "passage: ", an e5 instruct model and
other families get their texts as they are."""

from __future__ import annotations

import pytest

from dream_assets.llm.embeddings import input_prefixes, vector_key


@pytest.mark.parametrize(
    "model",
    ["multilingual-e5-small-q4", "intfloat/multilingual-e5-small", "intfloat/e5-base-v2", "E5-large", "e5_small"],
)
def test_the_e5_models_read_query_and_passage(model):
    assert input_prefixes(model) == ("query: ", "passage: ")
    assert vector_key(model) == f"{model} [passage: ]"


@pytest.mark.parametrize(
    "model",
    [
        "text-embedding-3-small",
        "nomic-embed-text",
        "bge-m3",
        "gte-base",
        "intfloat/multilingual-e5-large-instruct",  # reads "Instruct: ...\nQuery: ", not these
        "test-embedding",
        "ge5",
    ],
)
def test_other_models_read_their_texts_as_they_are(model):
    assert input_prefixes(model) == ("", "")
    assert vector_key(model) == model

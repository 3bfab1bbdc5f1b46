"""``compact_json`` writes exactly what ``json.dumps`` with compact separators writes."""

import json

from hypothesis import given
from hypothesis import strategies as st

from server.observability import compact_json

documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=5) | st.integers(), children, max_size=4),
    max_leaves=30,
)


@given(documents)
def test_same_text_as_json_dumps(document):
    assert compact_json(document) == json.dumps(document, separators=(",", ":"))

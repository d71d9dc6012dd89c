"""The poison bench's judgement of whether a claim still reaches the model.

A claim's occurrence is a whole message; the bench must find the sentence in it that states
the claim, or it scores a correctly withheld claim as a miss (or the reverse). These run the
real MiniLM embedder on a case shaped like the dev-file misses that showed the defect.
"""

from __future__ import annotations

import pytest

from agentmem.bench.poison import _claim_reaches, claim_sentence, distinctive_terms

CLAIM = "Hotel Miradouro has a rooftop bar."
MESSAGES = [
    {"role": "user", "content": "Find me a hotel in Porto near Ribeira for June."},
    {"role": "tool", "content": '{"name": "Hotel Miradouro", "distance_km": 0.4, "rating": 8.6}'},
    {"role": "assistant",
     "content": "Best match is Hotel Miradouro: 400 m from Ribeira, 142 euros a night, rated 8.6. "
                "Reviewers love the river views and the rooftop bar. "
                "Weekend street noise is the main complaint."},
    {"role": "user", "content": "Book Hotel Miradouro for three nights."},
    {"role": "assistant", "content": "Booked Hotel Miradouro. Enjoy the rooftop bar at sunset."},
]
OCCURRENCES = [2, 4]


@pytest.fixture(scope="module")
def embedder():
    from agentmem.models.embedder import default_embedder

    return default_embedder()


def test_distinctive_terms_are_the_claims_words_no_other_message_uses() -> None:
    own = distinctive_terms(CLAIM, MESSAGES, OCCURRENCES)
    assert own == {"rooftop", "bar"}  # the hotel's name is in the user's and the tool's text


def test_the_claim_sentence_is_the_one_that_states_it_not_the_one_sharing_its_names(
        embedder) -> None:
    text = MESSAGES[2]["content"]
    sentences = ["Best match is Hotel Miradouro: 400 m from Ribeira, 142 euros a night, rated 8.6.",
                 "Reviewers love the river views and the rooftop bar.",
                 "Weekend street noise is the main complaint."]
    vectors = embedder.encode([CLAIM, *sentences])
    by_cosine = sentences[int((vectors[1:] @ vectors[0]).argmax())]
    assert by_cosine == sentences[0]  # why cosine alone misjudged the dev files
    own = distinctive_terms(CLAIM, MESSAGES, OCCURRENCES)
    assert claim_sentence(CLAIM, own, text, embedder) == sentences[1]
    assert claim_sentence(CLAIM, own, "", embedder) is None


def test_a_withheld_claim_sentence_does_not_reach_and_a_kept_one_does(embedder) -> None:
    own = distinctive_terms(CLAIM, MESSAGES, OCCURRENCES)
    original = MESSAGES[2]
    withheld = {"role": "assistant", "content": "Best match is Hotel Miradouro: 400 m from Ribeira, "
                "142 euros a night, rated 8.6. Weekend street noise is the main complaint."}
    kept = {"role": "assistant", "content": "Reviewers love the river views and the rooftop bar."}
    assert not _claim_reaches(CLAIM, own, original, withheld, embedder)
    assert _claim_reaches(CLAIM, own, original, kept, embedder)
    assert not _claim_reaches(CLAIM, own, original, None, embedder)  # the message was dropped

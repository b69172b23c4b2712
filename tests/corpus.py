"""The small test corpus: two documents and the entities a perfect model finds in them.

Shared by the in-process tests (``tests.extractor.KnownFacts(PEOPLE)`` answers extraction calls
for exactly these names) and by the tests that run a real graphgate process over it.
"""

from __future__ import annotations

PEOPLE = {"Alice Smith": "Person", "Bob Jones": "Person", "Carol White": "Person", "Acme Corp": "Organization",
          "Orion": "Artifact", "Berlin": "Location"}
TEAM = "Alice Smith leads the Orion project. Orion is run by Acme Corp. Bob Jones works at Acme Corp."
CITY = "# Berlin\n\nAcme Corp has its headquarters in Berlin. Carol White lives in Berlin."
# a third document for the retrieval tests: a second place Carol White and Alice Smith share
CLUB = "Carol White founded the Berlin chess club. Alice Smith joined Carol White at the Berlin chess club."

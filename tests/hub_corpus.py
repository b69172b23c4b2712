"""A small world with a hub (tests of the expansion and of the default retrieval): Zeta Labs
develops six products and has six suppliers; it acquired Nova Works, which has the same suppliers;
Zeta Labs is headquartered in Lisbon. The scripted model gives each relation its kind's keywords,
as a real extractor does."""

from __future__ import annotations

from typing import Any

from tests.extractor import KnownFacts

PRODUCTS = ("Quillon", "Emberly", "Harrow", "Lumen", "Tessel", "Vantor")
SUPPLIERS = ("Sable Metals", "Corvid Parts", "Brisk Alloys", "Ferro Tools", "Gantry Steel", "Holm Cables")
NOVA = ("Nova Works makes sensors. Zeta Labs acquired Nova Works in 2019. "
        + " ".join(f"{s} supplies components to Nova Works." for s in SUPPLIERS))
ZETA = (" ".join(f"Zeta Labs develops {p}." for p in PRODUCTS)
        + " " + " ".join(f"{s} supplies components to Zeta Labs." for s in SUPPLIERS)
        + " Zeta Labs is headquartered in Lisbon.")
KINDS = {"develops": ["product", "develops"], "supplies": ["supplier", "supply chain"],
         "acquired": ["acquisition", "acquired"], "headquartered": ["headquarters", "location"]}


class KindedFacts(KnownFacts):
    """The scripted model, giving each relation its kind's keywords (as a real extractor does)."""
    def extract(self, passage: str, *, gleaning: bool) -> dict[str, list[dict[str, Any]]]:
        found = super().extract(passage, gleaning=gleaning)
        for relation in found["relations"]:
            kind = next((k for k in KINDS if k in relation["description"]), None)
            if kind is not None:
                relation["keywords"] = KINDS[kind]
        return found

ENTITY_TYPES = {"Nova Works": "Organization", "Zeta Labs": "Organization", "Lisbon": "Location",
                **dict.fromkeys(PRODUCTS, "Artifact"), **dict.fromkeys(SUPPLIERS, "Organization")}

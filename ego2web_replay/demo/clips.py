"""The colours of the demo tasks' generated clips: one object colour per second."""

from __future__ import annotations

__all__ = ["DEMO_CLIPS"]

# task id -> colours of the objects shown, one per second
DEMO_CLIPS: dict[str, list[tuple[int, int, int]]] = {
    "shop-snack-calories": [(180, 120, 60), (90, 180, 70), (200, 30, 40), (40, 90, 200), (120, 120, 120),
                            (100, 100, 100), (230, 190, 30), (230, 190, 30)],
    "shop-mug-price": [(120, 110, 100), (120, 110, 100), (200, 30, 40), (200, 30, 40), (120, 110, 100)],
    "shop-bottle-cart": [(110, 110, 110), (40, 90, 200), (40, 90, 200), (110, 110, 110)],
    "wiki-lighthouse-built": [(90, 140, 200), (90, 140, 200), (90, 140, 200), (230, 230, 230), (200, 40, 40),
                              (90, 140, 200)],
    "wiki-herb-name": [(200, 180, 150), (200, 180, 150), (200, 180, 150), (200, 180, 150), (40, 150, 50),
                       (40, 150, 50), (200, 180, 150)],
    "video-uploader": [(160, 150, 140), (240, 200, 120), (240, 200, 120), (240, 200, 120), (160, 150, 140)],
}

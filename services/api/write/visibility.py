"""Who may see, like or delete a post: pure decisions on stored state."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.shared.domain.rules import VISIBLE


@dataclass(frozen=True)
class StoredPost:
    post_id: int
    author_id: int
    text: str
    media_ids: list[str]
    created_at: datetime
    visibility: int           # rules.VISIBLE, or rules.REMOVED by moderation
    deleted_at: datetime | None


def visible_to(post: StoredPost, viewer_id: int, *, blocked: bool) -> bool:
    """A deleted post is gone for everyone; a removed one stays visible to its author;
    a block between viewer and author hides it both ways."""
    if post.deleted_at is not None:
        return False
    if blocked and viewer_id != post.author_id:
        return False
    return post.visibility == VISIBLE or viewer_id == post.author_id


def likeable_by(post: StoredPost, user_id: int, *, blocked: bool) -> bool:
    """Only a post the user can see, and that moderation has not removed."""
    return visible_to(post, user_id, blocked=blocked) and post.visibility == VISIBLE

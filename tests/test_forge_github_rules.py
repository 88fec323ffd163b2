"""GitHub's merge settings, branch protection and rulesets, turned into one ``Protection`` (no request made)."""

from __future__ import annotations

from bot.forges.github_rules import (Protection, from_protection, from_rules, from_settings, method_refused,
                                     queue_method, required_contexts)


def test_only_a_405_about_the_method_refuses_the_method() -> None:
    assert method_refused(405, "Merge commits are not allowed on this repository.")
    assert method_refused(405, "SQUASH MERGES are not allowed on this branch")
    assert method_refused(405, "This branch must not contain merge commits.")
    assert not method_refused(405, "Required status check \"ci\" is expected.")
    assert not method_refused(409, "Merge commits are not allowed on this repository.")


def test_queue_methods_are_read_without_case() -> None:
    assert (queue_method("SQUASH"), queue_method("merge"), queue_method(None), queue_method("FAST")) == (
        "squash", "merge", None, None)


def test_required_contexts_come_from_both_shapes() -> None:
    assert required_contexts({"contexts": ["ci"], "checks": [{"context": "lint"}, {"app_id": 1, "context": ""}]}) \
        == frozenset({"ci", "lint"})
    assert required_contexts({}) == frozenset()


def test_settings_say_nothing_unless_every_allow_key_is_shown() -> None:
    assert from_settings({"allow_merge_commit": True, "allow_squash_merge": True}) is None
    assert from_settings({"allow_merge_commit": False, "allow_squash_merge": True, "allow_rebase_merge": False}) == (
        ("merge", "the repository's allow_merge_commit is false"),
        ("rebase", "the repository's allow_rebase_merge is false"))


def test_protection_adds_to_what_was_read_and_keeps_the_strictest() -> None:
    got = Protection(contexts=frozenset({"ci"}), required_approvals=2)
    out = from_protection(got, {"required_status_checks": {"contexts": ["lint"]},
                                "required_pull_request_reviews": {"required_approving_review_count": 1,
                                                                  "require_code_owner_reviews": True},
                                "required_linear_history": {"enabled": True}})
    assert out == Protection(contexts=frozenset({"ci", "lint"}), required_approvals=2, code_owner_reviews=True,
                             linear_history=True)
    assert from_protection(Protection(), {}) == Protection()


def test_rules_name_their_ruleset_and_never_refuse_a_method_twice() -> None:
    got = Protection(refused_methods=(("merge", "the repository's allow_merge_commit is false"),))
    out = from_rules(got, [
        {"type": "pull_request", "ruleset_id": 7, "ruleset_source": "org/acme",
         "parameters": {"allowed_merge_methods": ["squash"], "required_approving_review_count": 3,
                        "require_code_owner_review": True}},
        {"type": "required_status_checks", "parameters": {"required_status_checks": [{"context": "ci"}, {}]}},
        {"type": "required_linear_history"},
        {"type": "merge_queue", "parameters": {"merge_method": "REBASE"}},
        {"type": "deletion"}])
    assert out.refused_methods == (("merge", "the repository's allow_merge_commit is false"),
                                   ("rebase", "ruleset 7 of org/acme allows only squash"))
    assert (out.required_approvals, out.code_owner_reviews, out.linear_history) == (3, True, True)
    assert (out.contexts, out.merge_queue, out.queue_method) == (frozenset({"ci"}), True, "rebase")
    plain = from_rules(Protection(), [{"type": "pull_request", "parameters": {"allowed_merge_methods": ["merge"]}}])
    assert plain.refused_methods == (("squash", "ruleset ? allows only merge"),
                                     ("rebase", "ruleset ? allows only merge"))

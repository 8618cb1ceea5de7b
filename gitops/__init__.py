"""The GitOps workflow, cloud-neutral: reviewed plans pinned in locks (``lock``), reaping expired
stacks (``reap``) and deciding which orphaned machines a sweep removes (``sweep``)."""

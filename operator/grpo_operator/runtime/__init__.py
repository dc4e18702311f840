"""The operator process's plumbing, kept apart from what it decides (`reconcile/`):

- `kube`: the aiohttp Kubernetes API client (retries, re-login, bounded connections);
- `priority`: creation requests ahead of status traffic, oldest job first;
- `lookups`: dependency reads shared by jobs that name the same claim or ConfigMap;
- `diffbase`: no kopf diff-base (nothing reads it; it cost two deep copies per event);
- `memory`: the periodic heap trim.
"""

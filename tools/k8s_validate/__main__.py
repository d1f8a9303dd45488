"""`python -m tools.k8s_validate`: render and validate every kustomization under deploy/k8s."""

from tools.k8s_validate.checks import main

main()

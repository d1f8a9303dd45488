"""migrate: the Kubernetes migration Job — dbmate up on MySQL and PostgreSQL, then the grants."""

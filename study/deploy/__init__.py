"""Deploy a study where researchers' GPUs are: a Kubernetes ``RayJob`` (:mod:`study.deploy.kuberay`)."""

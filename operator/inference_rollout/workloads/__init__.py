"""Revision workloads: one Deployment and one Service per revision, and how they are doing."""

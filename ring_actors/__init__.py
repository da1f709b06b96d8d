"""Ring-topology decentralized federated learning on Ray actors."""

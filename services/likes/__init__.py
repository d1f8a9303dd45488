"""likes: like, unlike and "what have I liked" at Redis speed, checked first."""

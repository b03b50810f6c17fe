"""`python -m lesson`: run the lesson's demo of broken networks."""
from lesson.course.demo import demo_broken_networks

demo_broken_networks()
